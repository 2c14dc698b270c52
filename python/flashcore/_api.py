"""The Python API: argument handling, output allocation, stream lookup.

Arrays go to the C++ library in place (DLPack / buffer protocol through nanobind);
outputs are allocated here in the framework of the inputs, on their device. Importing
this module imports no torch, cupy or jax: a framework is recognised by the module that
defines the array's type, and is imported (already loaded by the caller) only to
allocate or to read its current stream.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import types

import numpy as np

from . import _core

__all__ = ["attention", "attention_backward", "attention_with_kvcache", "merge_states", "merge_states_n",
           "softmax_v", "gemm_chain"]

_STRATEGIES = {
    "auto": 0, "automatic": 0,
    "two-pass": 1, "two_pass": 1,
    "three-pass": 2, "three_pass": 2,
    "online": 3,
}
_EXP_MODES = {"exact": 0, "fast": 1}

# type -> framework name ("numpy", "torch", or the root module of another DLPack array).
_FRAMEWORK_OF_TYPE: dict[type, str] = {np.ndarray: "numpy"}


def _framework(x, name: str) -> str:
    t = type(x)
    fw = _FRAMEWORK_OF_TYPE.get(t)
    if fw is not None:
        return fw
    if isinstance(x, np.ndarray):
        fw = "numpy"
    elif hasattr(t, "__dlpack__"):
        fw = t.__module__.partition(".")[0]
        if fw in ("jaxlib",):
            fw = "jax"
    else:
        raise TypeError(
            f"{name}: expected an array (numpy, torch, cupy, jax: anything with __dlpack__), "
            f"got {t.__name__}")
    _FRAMEWORK_OF_TYPE[t] = fw
    if fw == "torch" and _TORCH is None:
        _torch_init()
    return fw


def _same_framework(x, name: str, fw: str, ref: str, optional: bool = False) -> None:
    if x is None and optional:
        return
    got = _framework(x, name)
    if got != fw:
        raise TypeError(f"{name}: is a {got} array but {ref} is a {fw} array; "
                        f"pass arrays of one framework")


def _empty(like, fw: str, shape: tuple, float32: bool = False, bf16_for_fp8: bool = False,
           fill=None):
    """An uninitialised array of `shape` in `like`'s framework, dtype and device
    (float32 instead with float32=True; bfloat16 for an fp8 `like` with bf16_for_fp8),
    or one filled with `fill` when given."""
    if fw == "numpy":
        dtype = np.float32 if float32 else like.dtype
        return np.empty(shape, dtype=dtype) if fill is None else np.full(shape, fill, dtype=dtype)
    if fw == "torch":
        dtype = None
        if float32 or (bf16_for_fp8 and like.element_size() == 1):  # 1-byte floats: fp8
            import torch  # already imported by the caller's program: it made `like`
            dtype = torch.float32 if float32 else torch.bfloat16
        if fill is not None:
            return like.new_full(shape, fill, dtype=dtype)
        return like.new_empty(shape) if dtype is None else like.new_empty(shape, dtype=dtype)
    if fw == "cupy":  # CuPy arrays have no __array_namespace__ (CuPy 14)
        import cupy
        dtype = np.float32 if float32 else like.dtype
        with like.device:
            return cupy.empty(shape, dtype=dtype) if fill is None else cupy.full(shape, fill, dtype=dtype)
    ns = getattr(like, "__array_namespace__", None)
    if ns is None:
        raise TypeError(f"out: cannot allocate a {fw} array (it has no __array_namespace__); "
                        f"pass out= (and compute the lse yourself)")
    xp = ns()
    dtype = xp.float32 if float32 else like.dtype
    if fill is not None:
        return xp.full(shape, fill, dtype=dtype, device=like.device)
    return xp.empty(shape, dtype=dtype, device=like.device)


# torch's fast path (attention): set by _torch_init when torch registers its tensor type in
# _FRAMEWORK_OF_TYPE (a first torch call), so a program without torch never imports it:
# the plain tensor type, the library's DType code of each torch dtype (flashcore.hpp), and
# torch's current device and current raw stream (its C functions; the public API where
# they are missing, slower).
_TORCH = None


def _torch_init() -> None:
    global _TORCH
    import torch  # already imported by the caller's program: it made the tensor
    c = torch._C
    fast = hasattr(c, "_cuda_getDevice") and hasattr(c, "_cuda_getCurrentRawStream")
    _TORCH = types.SimpleNamespace(
        tensor=torch.Tensor,
        codes={torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float8_e4m3fn: 3,
               torch.float8_e5m2: 4, torch.int32: 5},
        device=c._cuda_getDevice if fast else torch.cuda.current_device,
        stream=c._cuda_getCurrentRawStream if fast else (lambda d: torch.cuda.current_stream(d).cuda_stream),
        grad_enabled=torch.is_grad_enabled)


def _torch_view(t):
    """A plain torch tensor on the CPU or a CUDA GPU, of a dtype the library knows, as
    _core's raw view (pointer, dtype code, device index or -1, shape, strides: core.cpp
    import_raw); any other one (a subclass, a dtype we do not take, another device, a
    negated view) as itself, for DLPack, whose errors name it."""
    code = _TORCH.codes.get(t.dtype)
    if code is None or type(t) is not _TORCH.tensor or t.is_neg():
        return t
    if t.is_cuda:
        dev = t.get_device()
    elif t.is_cpu:
        dev = -1
    else:
        return t
    return (t.data_ptr(), code, dev, t.shape, t.stride())


def _cuda_stream(x, fw: str) -> int:
    """The framework's current CUDA stream for a CUDA array (0 = default stream)."""
    if fw == "torch":  # (_TORCH is set by the first torch array _framework saw)
        return _TORCH.stream(x.get_device())
    if fw == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0


def _is_cuda(x, fw: str) -> bool:
    if fw == "numpy":
        return False
    if fw == "torch":
        return x.is_cuda
    dev = getattr(x, "__dlpack_device__", None)
    return dev is not None and dev()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged


def _shape(x, name: str, rank: int, layout: str) -> tuple:
    shape = tuple(x.shape)
    if len(shape) != rank:
        raise ValueError(f"{name}: expected rank {rank} {layout}, got shape {shape}")
    return shape


def _strategy(strategy) -> int:
    code = _STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    if code is None:
        raise ValueError(f"strategy: must be one of 'auto', 'two-pass', 'three-pass', "
                         f"'online', got {strategy!r}")
    return code


def _exp(exp) -> int:
    code = _EXP_MODES.get(exp) if isinstance(exp, str) else None
    if code is None:
        raise ValueError(f"exp: must be 'exact' or 'fast', got {exp!r}")
    return code


def _threads(threads) -> int:
    if threads is None:
        return 0
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"threads: must be None or an int >= 0, got {threads!r}")
    return threads


def _impl(impl):
    if impl is not None and not isinstance(impl, str):
        raise TypeError(f"impl: must be None or a kernel key (str), got {type(impl).__name__}")
    if impl is not None and "\0" in impl:  # the C string would end at it
        raise ValueError(f"impl: contains a NUL character: {impl!r}")
    return impl


def _flag(value, name: str) -> bool:
    """A boolean option: bool, numpy bool or the ints 0 / 1; anything else (a string such as
    'no', which is truthy) is refused rather than read by its truth value."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name}: must be a bool, got {value!r}")


def _finite(value, name: str, positive: bool = False) -> float:
    """value (a real number, not a string or bool) as a finite float32 value (> 0 with
    positive=True), else an error naming `name`. The library takes float32: a value that
    rounds to 0 or overflows there is refused too, not changed silently."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: must be a real number, got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x) or (positive and x <= 0.0):
        raise ValueError(f"{name}: must be finite{' and > 0' if positive else ''}, got {value!r}")
    with np.errstate(over="ignore", under="ignore"):
        x32 = float(np.float32(x))
    if not math.isfinite(x32) or (x != 0.0 and x32 == 0.0):
        raise ValueError(f"{name}: {value!r} is not representable in float32 (it becomes {x32})")
    return x32


def _descales(qd, kd, vd, fw: str) -> dict:
    """The descale keywords of _core.attention: a float factor as itself (finite, > 0), an
    array (anything with a non-empty shape) as a per-head array (checked by _core)."""
    out = {}
    for name, x in (("q_descale", qd), ("k_descale", kd), ("v_descale", vd)):
        if len(getattr(x, "shape", ())) > 0:
            _same_framework(x, name, fw, "q")
            out[name + "_heads"] = x
        else:
            out[name] = _finite(x, name, positive=True)
    return out


def _scale(scale, default: float) -> float:
    return default if scale is None else _finite(scale, "scale")


def _window(window) -> tuple[int, int]:
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(f"window: must be a pair (left, right), got {window!r}") from None
    for side, w in (("left", left), ("right", right)):
        if not isinstance(w, (int, np.integer)) or isinstance(w, bool) or w < -1:
            raise ValueError(f"window: {side} must be an int >= -1 (-1 = unbounded), got {w!r}")
    return int(left), int(right)


def _params(fw, *, causal=False, window=(-1, -1), scale=None, strategy="auto", exp="exact",
            cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
            threads=None, impl=None, exact_fp32=False, q_descale=1.0, k_descale=1.0,
            v_descale=1.0, deterministic=False, softcap=None, alibi_slopes=None, sinks=None,
            dsinks=None):
    """The options of attention / attention_backward as the one _core.AttentionParams of the
    call: checked, converted, array options in q's framework `fw` (torch: raw views). Only
    options that differ from the defaults are written (the common call sets none)."""
    p = _core.AttentionParams()
    if causal is not False:
        p.causal = _flag(causal, "causal")
    if window != (-1, -1):
        p.window_left, p.window_right = _window(window)
    if scale is not None:
        scale = _scale(scale, 0.0)
        if scale == 0.0:  # the C++ API reads 0 as "default"; a zero scale is not a request
            raise ValueError("scale: must be non-zero (None = 1/sqrt(D))")
        p.scale = scale
    if strategy != "auto":
        code = _STRATEGIES.get(strategy) if type(strategy) is str else None
        p.strategy = _strategy(strategy) if code is None else code
    if exp != "exact":
        p.exp = _exp(exp)
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        _same_framework(cu_seqlens_q, "cu_seqlens_q", fw, "q", optional=True)
        _same_framework(cu_seqlens_k, "cu_seqlens_k", fw, "q", optional=True)
        p.cu_seqlens_q, p.cu_seqlens_k = _view(cu_seqlens_q, fw), _view(cu_seqlens_k, fw)
    if max_seqlen_q is not None or max_seqlen_k is not None:
        p.max_seqlen_q = _max_seqlen(max_seqlen_q, "max_seqlen_q")
        p.max_seqlen_k = _max_seqlen(max_seqlen_k, "max_seqlen_k")
    if threads is not None:
        p.threads = _threads(threads)
    if impl is not None:
        p.impl = _impl(impl)
    if exact_fp32 is not False:
        p.exact_fp32 = _flag(exact_fp32, "exact_fp32")
    if not (type(q_descale) is float and type(k_descale) is float and type(v_descale) is float
            and q_descale == k_descale == v_descale == 1.0):
        for name, x in _descales(q_descale, k_descale, v_descale, fw).items():
            setattr(p, name, _view(x, fw) if name.endswith("_heads") else x)
    if deterministic is not False:
        p.deterministic = _flag(deterministic, "deterministic")
    if softcap is not None:
        p.softcap = _finite(softcap, "softcap")  # (0 = off; the library refuses < 0)
    for name, x in (("alibi_slopes", alibi_slopes), ("sinks", sinks), ("dsinks", dsinks)):
        if x is not None:
            _same_framework(x, name, fw, "q")
            setattr(p, name, _view(x, fw))
    return p


def _max_seqlen(n, name):
    """A varlen bound: an int >= 0 (None = 0, not given); the library checks the rest."""
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name}: must be an int, got {type(n).__name__}")
    return n


def _device_of(x, fw: str):
    """A context that makes x's GPU the current device (a no-op when it already is)."""
    if fw == "torch":
        import torch
        index = x.device.index
        if index is None or index == torch.cuda.current_device():
            return contextlib.nullcontext()
        return torch.cuda.device(index)
    if fw == "cupy":
        return x.device  # cupy.cuda.Device is a context manager
    return contextlib.nullcontext()


def _view(x, fw: str):
    """An array for _core: a plain torch tensor as its raw view (_torch_view), else itself."""
    return _torch_view(x) if fw == "torch" and type(x) is _TORCH.tensor else x


def _call(op, fw: str, q, params, *arrays):
    """op(*arrays, params) (a _core function) on q's device: for a CUDA array with that
    device current and params.stream set to the framework's current stream. torch tensors go
    as raw views: 12-30 us less host time per CUDA call than DLPack and
    torch.cuda.current_stream (docs/results/python-2026-11-22.md)."""
    ctx = None
    if fw == "torch" and type(q) is _TORCH.tensor:
        arrays = tuple(None if x is None else _view(x, fw) for x in arrays)
        if q.is_cuda:
            dev = q.get_device()
            params.stream = _TORCH.stream(dev)
            if _TORCH.device() != dev:
                ctx = _device_of(q, fw)
    elif fw != "numpy" and _is_cuda(q, fw):
        ctx = _device_of(q, fw)
    if ctx is None:
        return op(*arrays, params)
    with ctx:  # q's device current: its stream, its launch
        if fw != "torch" or type(q) is not _TORCH.tensor:
            params.stream = _cuda_stream(q, fw)
        return op(*arrays, params)


def attention(q, k, v, *, causal=False, window=(-1, -1), scale=None, return_lse=False,
              out=None, strategy="auto", exp="exact", cu_seqlens_q=None, cu_seqlens_k=None,
              threads=None, impl=None, exact_fp32=False, q_descale=1.0, k_descale=1.0,
              v_descale=1.0, max_seqlen_q=None, max_seqlen_k=None, softcap=None,
              alibi_slopes=None, sinks=None):
    """O = softmax(scale * Q K^T + mask) V.

    q: [B, Sq, H, D], k: [B, Sk, Hkv, D], v: [B, Sk, Hkv, Dv] (H % Hkv == 0), any strides
    with a contiguous last dim (so q.transpose of a BHSD array works in place). Returns
    out [B, Sq, H, Dv] in q's framework, dtype and device, and with return_lse=True also
    lse [B, H, Sq] float32 (natural log of the softmax denominator; -inf for a fully
    masked row, whose output is 0).

    causal / window=(left, right) (-1 = unbounded) align to the bottom-right corner when
    Sq != Sk: query i sees key j iff i + Sk - Sq - left <= j <= i + Sk - Sq + right
    (causal: right = 0). scale defaults to 1/sqrt(D). strategy: 'auto', 'two-pass',
    'three-pass', 'online'. exp: 'exact' or 'fast'. Varlen: B = 1 with the sequences
    packed along dim 1 and int32 prefix sums cu_seqlens_q / cu_seqlens_k (length
    batch + 1) on q's device; lse is then [1, H, total_q]. max_seqlen_q / max_seqlen_k
    (varlen, both or neither): bounds of the longest sequences; given, a CUDA call reads
    cu_seqlens on the device only (no stream synchronization, so it can be captured in a
    CUDA graph) and trusts them and the bounds; without them it copies cu_seqlens to the
    host and checks them. threads: CPU threads
    (None = all cores). impl: force a kernel key (see list_kernels()). exact_fp32: CUDA
    fp32 without TF32. CUDA arrays run on the framework's current stream.

    torch tensors that require grad (with grad mode on) give an out that backpropagates
    into q, k and v through attention_backward (flashcore.torch's registered op; lse, when
    returned, is not differentiable; out= is then refused).

    fp8 (float8_e4m3fn q, k, v on a Hopper GPU): the factors q_descale, k_descale,
    v_descale (scores = scale * q_descale * k_descale * Q K^T, O = v_descale * P V; they
    must be 1 for other dtypes) and out in bfloat16 (the default) or float16. Each factor
    is a float (per tensor) or a float32 array [B, Hkv] on q's device (per batch entry and
    KV head, as FlashAttention-3's descale tensors; a query head takes its KV head's).

    Score variants (docs/variants.md; CPU arrays, and CUDA f32 / f16 / bf16 arrays in the
    forward): softcap=c (> 0; None or 0 = off):
    each scaled score s becomes c * tanh(s / c), as Gemma 2 and FlashAttention define it.
    alibi_slopes: float32 [H] or [B, H] (varlen: per sequence) on q's device; query i of head
    h subtracts slope * |i + Sk - Sq - j| from its score with key j. sinks: float32 [H], a
    logit per head in every row's softmax denominator without a value (gpt-oss); lse includes
    it, a fully masked row gives 0 and lse = the sink. torch tensors: out backpropagates into
    sinks too (alibi_slopes are constants).
    """
    # Written for the common call (numpy or torch, default options) to cost a few
    # microseconds: _params writes only the options that differ from the defaults.
    tq = type(q)
    fw = _FRAMEWORK_OF_TYPE.get(tq) or _framework(q, "q")
    if type(k) is not tq:
        _same_framework(k, "k", fw, "q")
    if type(v) is not tq:
        _same_framework(v, "v", fw, "q")
    if type(return_lse) is not bool:
        return_lse = _flag(return_lse, "return_lse")
    # Varlen: rows past cu_seqlens_q[-1] belong to no sequence and the library does not
    # write them; outputs allocated here are defined there (out 0, lse -inf: no keys).
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if fw == "torch" and (q.requires_grad or k.requires_grad or v.requires_grad or
                          getattr(sinks, "requires_grad", False)) and _TORCH.grad_enabled():
        if out is not None:
            raise ValueError("out: cannot be given when q, k, v or sinks require grad (autograd makes out)")
        from . import torch as _fct  # imports torch, already loaded by the caller
        return _fct._differentiable(q, k, v, causal=causal, window=window, scale=scale,
                                    return_lse=return_lse, strategy=strategy, exp=exp,
                                    cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                    threads=threads, impl=impl, max_seqlen_q=max_seqlen_q,
                                    max_seqlen_k=max_seqlen_k, softcap=softcap,
                                    alibi_slopes=alibi_slopes, sinks=sinks)
    params = _params(fw, causal=causal, window=window, scale=scale, strategy=strategy, exp=exp,
                     cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, threads=threads,
                     impl=impl, exact_fp32=exact_fp32, q_descale=q_descale, k_descale=k_descale,
                     v_descale=v_descale, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)
    if out is None or return_lse:
        shape = q.shape
        if len(shape) != 4:
            _shape(q, "q", 4, "[B, Sq, H, D]")
        b, sq, h, _ = shape
    if out is None:
        vshape = v.shape
        if len(vshape) != 4:
            _shape(v, "v", 4, "[B, Sk, Hkv, Dv]")
        out = _empty(q, fw, (b, sq, h, vshape[3]), bf16_for_fp8=True, fill=0.0 if varlen else None)
    elif type(out) is not tq:
        _same_framework(out, "out", fw, "q")
    lse = _empty(q, fw, (b, h, sq), float32=True, fill=-math.inf if varlen else None) if return_lse else None
    _call(_core.attention, fw, q, params, q, k, v, out, lse)
    return (out, lse) if return_lse else out


def attention_backward(q, k, v, out, dout, lse, *, causal=False, window=(-1, -1), scale=None,
                       exp="exact", cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                       max_seqlen_k=None, threads=None, impl=None, deterministic=False,
                       softcap=None, alibi_slopes=None, sinks=None, dq=None, dk=None, dv=None,
                       dsinks=None):
    """The gradients (dq, dk, dv) of attention's out, given dout = dL/d(out).

    q, k, v and the options are the forward's; out and lse are what the forward returned
    (attention(..., return_lse=True)); dout has out's shape and dtype. dq, dk, dv come back
    in the shapes, dtype and framework of q, k, v (or are written into the given arrays,
    which may be strided views with a contiguous last dim). The math is FlashAttention-2's
    (P recomputed from lse, fp32 sums; docs/backward.md); a fully masked row gives zero
    gradients. GQA: dk/dv of a KV head sum over its query heads. deterministic=True: the
    same bits whatever the thread count (CPU; default: the same bits from run to run at one
    thread count). impl: a CPU GEMM micro-kernel key. softcap, alibi_slopes, sinks: the
    forward's score variants; with sinks the result is (dq, dk, dv, dsinks), dsinks float32
    [H] (the sinks' gradient; written into dsinks= when given).
    """
    return _backward(q, k, v, out, dout, lse, causal=causal, window=window, scale=scale, exp=exp,
                     cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, threads=threads,
                     impl=impl, deterministic=deterministic, softcap=softcap,
                     alibi_slopes=alibi_slopes, sinks=sinks, dq=dq, dk=dk, dv=dv, dsinks=dsinks)


def _backward(q, k, v, out, dout, lse, *, dq=None, dk=None, dv=None, dsinks=None, reference=False,
              **options):
    """attention_backward; reference=True runs the library's fp64 reference instead (tests)."""
    fw = _framework(q, "q")
    for x, name in ((k, "k"), (v, "v"), (out, "out"), (dout, "dout"), (lse, "lse")):
        _same_framework(x, name, fw, "q")
    grads = []
    for g, like, name, layout in ((dq, q, "dq", "[B, Sq, H, D]"), (dk, k, "dk", "[B, Sk, Hkv, D]"),
                                  (dv, v, "dv", "[B, Sk, Hkv, Dv]")):
        if g is None:
            g = _empty(like, fw, _shape(like, name[1:], 4, layout))
        else:
            _same_framework(g, name, fw, "q")
        grads.append(g)
    sinks = options.get("sinks")
    if dsinks is not None and sinks is None:
        raise ValueError("dsinks: given without sinks (no sinks, no gradient)")
    if sinks is not None and dsinks is None:
        dsinks = _empty(sinks, fw, (_shape(sinks, "sinks", 1, "[H]")[0],), float32=True)
    params = _params(fw, dsinks=dsinks, **options)
    op = _REFERENCE_BACKWARD if reference else _core.attention_backward
    _call(op, fw, q, params, q, k, v, out, dout, lse, *grads)
    return tuple(grads) if sinks is None else (*grads, dsinks)


# The library's fp64 reference of attention_backward (CPU arrays; O, lse and P recomputed
# in fp64, out and lse only checked): for tests (tests/python/test_backward.py).
_REFERENCE_BACKWARD = functools.partial(_core.attention_backward, reference=True)


_KV_LAYOUTS = {"NHD": 0, "nhd": 0, "HND": 1, "hnd": 1}


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None, block_table=None,
                           kv_layout="NHD", causal=False, window=(-1, -1), scale=None, return_lse=False, out=None,
                           strategy="auto", exp="exact", threads=None, impl=None, softcap=None, alibi_slopes=None,
                           sinks=None, check_cache=False, k_descale=1.0, v_descale=1.0):
    """Attention of q [B, Sq, H, D] over each sequence's keys in a KV cache (the contract of
    FlashAttention's flash_attn_with_kvcache). Returns out [B, Sq, H, Dv] (and lse
    [B, H, Sq] float32 with return_lse=True).

    k_cache / v_cache (q's dtype, or both float8_e4m3fn: an fp8 cache; k_new /
    v_new then e4m3 too): contiguous [B, S_max, Hkv, D] or, with block_table (int32
    [B, max_pages], row b listing sequence b's pages in order), paged [num_pages, page_size,
    Hkv, D] with page_size a multiple of 8; kv_layout="HND" for [B, Hkv, S_max, D] /
    [num_pages, Hkv, page_size, D]. cache_seqlens: int32 [B], the keys each sequence holds.
    k_new / v_new [B, S_new, Hkv, D] (both or neither) are written into the caches in place
    at slots cache_seqlens[b] ..  cache_seqlens[b] + S_new - 1, and the attention sees them;
    cache_seqlens itself is not updated (add S_new before the next call). causal is
    bottom-right aligned: the Sq queries are the sequence's last positions and see the whole
    cache. window, scale, strategy, exp, threads, impl as attention's. Bad lengths and page
    ids (a length < 0, keys past S_max or past the sequence's pages, a page id outside the
    cache, two sequences appending to one slot) in CPU arrays are refused by name before anything is
    written. softcap, alibi_slopes ([H] or [B, H]; ALiBi distances from each sequence's own
    length, bottom-right) and sinks ([H]) as attention's. CPU arrays, or CUDA arrays (f16 /
    bf16 q, head dims multiples of 8, or 16 up to 128 over an fp8 cache; no score variants; cache_seqlens and block_table stay on
    the device unchecked: lengths are clamped to the cache, a page id outside it reads as
    zeros; check_cache=True copies them to the host, synchronizing, and refuses bad values
    by name as for CPU arrays); no autograd. k_descale / v_descale (an fp8 cache only): its
    dequantization factors, a float (finite, > 0) or a float32 [B, Hkv] array of per-head
    factors (scores = scale k_descale q.k, out = v_descale P V).
    """
    fw = _framework(q, "q")
    for x, name in ((k_cache, "k_cache"), (v_cache, "v_cache"), (cache_seqlens, "cache_seqlens")):
        _same_framework(x, name, fw, "q")
    for x, name in ((k_new, "k_new"), (v_new, "v_new"), (block_table, "block_table"), (out, "out")):
        _same_framework(x, name, fw, "q", optional=True)
    layout = _KV_LAYOUTS.get(kv_layout) if isinstance(kv_layout, str) else None
    if layout is None:
        raise ValueError(f"kv_layout: must be 'NHD' or 'HND', got {kv_layout!r}")
    if type(return_lse) is not bool:
        return_lse = _flag(return_lse, "return_lse")
    params = _params(fw, causal=causal, window=window, scale=scale, strategy=strategy, exp=exp, threads=threads,
                     impl=impl, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, k_descale=k_descale,
                     v_descale=v_descale)
    b, sq, h, _ = _shape(q, "q", 4, "[B, Sq, H, D]")
    if out is None:
        out = _empty(q, fw, (b, sq, h, _shape(v_cache, "v_cache", 4, "[.., Hkv, Dv]")[3]))
    lse = _empty(q, fw, (b, h, sq), float32=True) if return_lse else None
    check = _flag(check_cache, "check_cache")
    _call(lambda *a: _core.attention_with_kvcache(*a, check_contents=check), fw, q, params, q, k_cache, v_cache,
          cache_seqlens, block_table, k_new, v_new, out, lse, layout)
    return (out, lse) if return_lse else out


def merge_states(out_a, lse_a, out_b, lse_b, *, out=None, lse=None, threads=None):
    """The attention state over two disjoint key sets from each set's own: (out_a, lse_a) and
    (out_b, lse_b) as attention(..., return_lse=True) returns them (out [B, S, H, D] float32,
    float16 or bfloat16, both one dtype; lse float32 [B, H, S]). Returns (out, lse):
    lse = log(exp(lse_a) + exp(lse_b)), out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b,
    in fp32. A part with lse = -inf contributes nothing (its out is not read); both -inf give
    out 0 and lse -inf; a NaN lse gives a NaN row. out= / lse= may be given, also as out_a /
    lse_a themselves (merged in place; any other overlap with an input is refused). The
    weights are exp(lse_x - max) in fp32: at huge |lse| (scores ~1e20) fp32 keeps too few
    digits beside the max for log of the sums, and the weights follow. CPU and CUDA arrays
    (the framework's current stream; at most 48 parts per call on CUDA).
    """
    return _merge([out_a, out_b], [lse_a, lse_b], out, lse, threads, pair=True)


def merge_states_n(out_parts, lse_parts, *, out=None, lse=None, threads=None):
    """merge_states over n >= 1 parts at once: out_parts a sequence of [B, S, H, D] arrays or
    one [N, B, S, H, D] array, lse_parts a sequence of [B, H, S] float32 arrays or one
    [N, B, H, S] array. Returns (out, lse); out= / lse= may be one part's own arrays (in
    place)."""
    return _merge(_parts(out_parts, "out_parts", 5), _parts(lse_parts, "lse_parts", 4), out, lse, threads,
                  pair=False)


def _parts(x, name: str, stacked_rank: int) -> list:
    """A sequence of part arrays as a list; one stacked array as the list of its parts."""
    if isinstance(x, (list, tuple)):
        return list(x)
    if len(getattr(x, "shape", ())) == stacked_rank:
        return [x[i] for i in range(x.shape[0])]
    raise TypeError(f"{name}: expected a list of arrays or one array of rank {stacked_rank}, "
                    f"got {type(x).__name__}")


def _merge(outs, lses, out, lse, threads, pair):
    """merge_states / merge_states_n: outputs allocated in the parts' framework, then the
    library's merge (on the parts' device and stream)."""
    if not outs:
        raise ValueError("out_parts: merge_states needs at least one part")
    names = ("out_a", "out_b") if pair else tuple(f"out_parts[{i}]" for i in range(len(outs)))
    lnames = ("lse_a", "lse_b") if pair else tuple(f"lse_parts[{i}]" for i in range(len(lses)))
    first = outs[0]
    fw = _framework(first, names[0])
    for x, n in zip(outs, names):
        _same_framework(x, n, fw, names[0])
    for x, n in zip(lses, lnames):
        _same_framework(x, n, fw, names[0])
    _same_framework(out, "out", fw, names[0], optional=True)
    _same_framework(lse, "lse", fw, names[0], optional=True)
    if out is None or lse is None:
        b, s, h, _ = _shape(first, names[0], 4, "[B, S, H, D]")
        if out is None:
            out = _empty(first, fw, tuple(first.shape))
        if lse is None:
            lse = _empty(first, fw, (b, h, s), float32=True)
    params = _core.MergeStatesParams()
    if threads is not None:
        params.threads = _threads(threads)
    _call(_core.merge_states, fw, first, params, [_view(x, fw) for x in outs], [_view(x, fw) for x in lses],
          out, lse, pair)
    return out, lse


def softmax_v(s, v, *, scale=1.0, strategy="auto", exp="exact", out=None, threads=None,
              impl=None):
    """O = softmax(scale * S) V with S [M, L] (float32, or int32 dequantised by scale),
    V [L, d] and O [M, d] in V's dtype. S may be row- or column-major."""
    fw = _framework(s, "s")
    _same_framework(v, "v", fw, "s")
    _same_framework(out, "out", fw, "s", optional=True)
    if out is None:
        m = _shape(s, "s", 2, "[M, L]")[0]
        d = _shape(v, "v", 2, "[L, d]")[1]
        out = _empty(v, fw, (m, d))
    _core.softmax_v(s, v, out, _scale(scale, 1.0), _strategy(strategy), _exp(exp),
                    _threads(threads), _impl(impl))
    return out


def gemm_chain(a, b, c, *, out=None, threads=None, impl=None):
    """E = (A B) C with A [M, K1], B [K1, K2], C [K2, N], all one dtype; A B is never
    stored. Returns E [M, N]."""
    fw = _framework(a, "a")
    _same_framework(b, "b", fw, "a")
    _same_framework(c, "c", fw, "a")
    _same_framework(out, "out", fw, "a", optional=True)
    if out is None:
        m = _shape(a, "a", 2, "[M, K1]")[0]
        n = _shape(c, "c", 2, "[K2, N]")[1]
        out = _empty(a, fw, (m, n))
    _core.gemm_chain(a, b, c, out, _threads(threads), _impl(impl))
    return out
