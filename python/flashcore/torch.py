"""flashcore ops registered with torch.library, for autograd, torch.compile and CUDA graphs.

    import torch, flashcore.torch
    out = flashcore.torch.attention(q, k, v, causal=True)        # q/k/v: [B, S, H, D]
    out.sum().backward()                                         # dq, dk, dv by attention_backward
    out = torch.ops.flashcore.attention(q, k, v, True, -1, -1, 0.0, "auto", "exact",
                                        None, None)[0]

Importing this module imports torch; importing `flashcore` alone never does. Each op
is a `torch.library.custom_op` with a fake (meta) implementation that gives the output
shapes and dtypes without running anything, so torch.compile traces through it and
CUDA-graph capture records the kernel launched on the current stream.
`flashcore::attention` has an autograd formula (`register_autograd`): its backward is the
op `flashcore::attention_backward` (flashcore.attention_backward), so a loss backpropagates
into q, k and v, and torch.compile(fullgraph=True) traces the forward and the backward.
lse, the op's second output, is not differentiable. flashcore.attention on tensors that
require grad goes through this op. Under CUDA-graph capture, varlen on CUDA needs
max_seqlen_q / max_seqlen_k (without them cu_seqlens are copied to the host, which
synchronizes the stream).
"""


from typing import Optional

import torch

from . import _api

__all__ = ["attention", "attention_backward", "attention_with_kvcache", "softmax_v", "gemm_chain"]

_Tensor = torch.Tensor


def _opt(n):
    """0 / "" (the ops' spelling of "not given") as None for flashcore's Python API."""
    return n or None


def _softcap(c):
    """softcap as the ops' float (None = 0 = off); the library checks its value. (A plain
    float() so that torch.compile traces it.)"""
    return 0.0 if c is None else float(c)


@torch.library.custom_op("flashcore::attention", mutates_args=())
def _attention(q: _Tensor, k: _Tensor, v: _Tensor, causal: bool, window_left: int,
               window_right: int, scale: float, strategy: str, exp: str,
               cu_seqlens_q: Optional[_Tensor], cu_seqlens_k: Optional[_Tensor],
               max_seqlen_q: int = 0, max_seqlen_k: int = 0, threads: int = 0, impl: str = "",
               deterministic: bool = False, softcap: float = 0.0,
               alibi_slopes: Optional[_Tensor] = None,
               sinks: Optional[_Tensor] = None) -> tuple[_Tensor, _Tensor]:
    # (deterministic is the backward's: kept here for the autograd formula to read)
    with torch.no_grad():  # (flashcore.attention would route tensors that require grad here)
        out, lse = _api.attention(q, k, v, causal=causal, window=(window_left, window_right),
                                  scale=_opt(scale), return_lse=True, strategy=strategy, exp=exp,
                                  cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                  threads=_opt(threads), impl=_opt(impl), softcap=_opt(softcap),
                                  alibi_slopes=alibi_slopes, sinks=sinks)
    return out, lse


@_attention.register_fake
def _attention_fake(q, k, v, causal, window_left, window_right, scale, strategy, exp,
                    cu_seqlens_q, cu_seqlens_k, max_seqlen_q=0, max_seqlen_k=0, threads=0,
                    impl="", deterministic=False, softcap=0.0, alibi_slopes=None, sinks=None):
    torch._check(q.dim() == 4, lambda: f"q: expected rank 4 [B, Sq, H, D], got {q.dim()}")
    torch._check(v.dim() == 4, lambda: f"v: expected rank 4 [B, Sk, Hkv, Dv], got {v.dim()}")
    b, sq, h, _ = q.shape
    out = q.new_empty((b, sq, h, v.shape[3]))
    lse = q.new_empty((b, h, sq), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("flashcore::attention_backward", mutates_args=())
def _attention_backward(q: _Tensor, k: _Tensor, v: _Tensor, out: _Tensor, dout: _Tensor,
                        lse: _Tensor, causal: bool, window_left: int, window_right: int,
                        scale: float, exp: str, cu_seqlens_q: Optional[_Tensor],
                        cu_seqlens_k: Optional[_Tensor], max_seqlen_q: int = 0,
                        max_seqlen_k: int = 0, threads: int = 0, impl: str = "",
                        deterministic: bool = False, softcap: float = 0.0,
                        alibi_slopes: Optional[_Tensor] = None,
                        sinks: Optional[_Tensor] = None
                        ) -> tuple[_Tensor, _Tensor, _Tensor, _Tensor]:
    # autograd hands dout in any layout (out.sum() gives an expanded one: zero strides); the
    # library wants a contiguous last dim
    if dout.dim() == 4 and dout.stride(3) != 1:
        dout = dout.contiguous()
    grads = _api.attention_backward(q, k, v, out, dout, lse, causal=causal,
                                    window=(window_left, window_right), scale=_opt(scale), exp=exp,
                                    cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                    threads=_opt(threads), impl=_opt(impl),
                                    deterministic=deterministic, softcap=_opt(softcap),
                                    alibi_slopes=alibi_slopes, sinks=sinks)
    # (an op returns tensors only: without sinks, dsinks is an empty one)
    return grads if sinks is not None else (*grads, q.new_empty((0,), dtype=torch.float32))


@_attention_backward.register_fake
def _attention_backward_fake(q, k, v, out, dout, lse, causal, window_left, window_right, scale, exp,
                             cu_seqlens_q, cu_seqlens_k, max_seqlen_q=0, max_seqlen_k=0, threads=0,
                             impl="", deterministic=False, softcap=0.0, alibi_slopes=None,
                             sinks=None):
    h = 0 if sinks is None else sinks.shape[0]
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            q.new_empty((h,), dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    (q, k, v, causal, wl, wr, scale, _strategy, exp, cu_q, cu_k, max_q, max_k, threads, impl,
     deterministic, softcap, alibi_slopes, sinks) = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi_slopes, sinks)
    ctx.options = (causal, wl, wr, scale, exp, max_q, max_k, threads, impl, deterministic, softcap)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, cu_q, cu_k, alibi_slopes, sinks = ctx.saved_tensors
    causal, wl, wr, scale, exp, max_q, max_k, threads, impl, deterministic, softcap = ctx.options
    dq, dk, dv, dsinks = torch.ops.flashcore.attention_backward(
        q, k, v, out, dout, lse, causal, wl, wr, scale, exp, cu_q, cu_k, max_q, max_k, threads,
        impl, deterministic, softcap, alibi_slopes, sinks)
    # (no gradient for the options, the varlen arrays or the ALiBi slopes: constants)
    return (dq, dk, dv) + (None,) * 15 + (dsinks if sinks is not None else None,)


_attention.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("flashcore::attention_with_kvcache", mutates_args=("k_cache", "v_cache"))
def _attention_with_kvcache(q: _Tensor, k_cache: _Tensor, v_cache: _Tensor, cache_seqlens: _Tensor,
                            k_new: Optional[_Tensor], v_new: Optional[_Tensor], block_table: Optional[_Tensor],
                            kv_layout: str, causal: bool, window_left: int, window_right: int, scale: float,
                            threads: int = 0, k_descale: float = 1.0, v_descale: float = 1.0,
                            k_descale_heads: Optional[_Tensor] = None,
                            v_descale_heads: Optional[_Tensor] = None) -> tuple[_Tensor, _Tensor]:
    # (the caches are written only when k_new / v_new are given; declared mutated always)
    out, lse = _api.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, k_new=k_new, v_new=v_new,
                                           block_table=block_table, kv_layout=kv_layout, causal=causal,
                                           window=(window_left, window_right), scale=_opt(scale),
                                           return_lse=True, threads=_opt(threads),
                                           k_descale=_descale(k_descale, k_descale_heads),
                                           v_descale=_descale(v_descale, v_descale_heads))
    return out, lse


def _descale(factor: float, heads: Optional[_Tensor]):
    """An fp8 cache's factor for _api: the per-head array (times the per-tensor factor) or the
    float."""
    return factor if heads is None else heads * factor


@_attention_with_kvcache.register_fake
def _attention_with_kvcache_fake(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, kv_layout, causal,
                                 window_left, window_right, scale, threads=0, k_descale=1.0, v_descale=1.0,
                                 k_descale_heads=None, v_descale_heads=None):
    torch._check(q.dim() == 4, lambda: f"q: expected rank 4 [B, Sq, H, D], got {q.dim()}")
    torch._check(v_cache.dim() == 4, lambda: f"v_cache: expected rank 4, got {v_cache.dim()}")
    b, sq, h, _ = q.shape
    return q.new_empty((b, sq, h, v_cache.shape[3])), q.new_empty((b, h, sq), dtype=torch.float32)


@torch.library.custom_op("flashcore::softmax_v", mutates_args=())
def _softmax_v(s: _Tensor, v: _Tensor, scale: float, strategy: str, exp: str) -> _Tensor:
    return _api.softmax_v(s, v, scale=scale, strategy=strategy, exp=exp)


@_softmax_v.register_fake
def _softmax_v_fake(s, v, scale, strategy, exp):
    torch._check(s.dim() == 2 and v.dim() == 2, lambda: "s, v: expected rank 2 [M, L], [L, d]")
    return v.new_empty((s.shape[0], v.shape[1]))


@torch.library.custom_op("flashcore::gemm_chain", mutates_args=())
def _gemm_chain(a: _Tensor, b: _Tensor, c: _Tensor) -> _Tensor:
    return _api.gemm_chain(a, b, c)


@_gemm_chain.register_fake
def _gemm_chain_fake(a, b, c):
    torch._check(a.dim() == 2 and c.dim() == 2, lambda: "a, c: expected rank 2")
    return a.new_empty((a.shape[0], c.shape[1]))


def attention(q, k, v, *, causal=False, window=(-1, -1), scale=None, return_lse=False,
              strategy="auto", exp="exact", cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=None, max_seqlen_k=None, threads=None, impl=None,
              deterministic=False, softcap=None, alibi_slopes=None, sinks=None):
    """flashcore.attention as the registered op torch.ops.flashcore.attention (see
    flashcore.attention for the arguments), differentiable in q, k, v and sinks: its backward
    runs flashcore.attention_backward (deterministic: that call's option). Returns out, or
    (out, lse)."""
    wl, wr = _api._window(window)
    out, lse = torch.ops.flashcore.attention(
        q, k, v, _api._flag(causal, "causal"), wl, wr, 0.0 if scale is None else _api._scale(scale, 0.0),
        strategy, exp, cu_seqlens_q, cu_seqlens_k, max_seqlen_q or 0, max_seqlen_k or 0,
        _api._threads(threads), _api._impl(impl) or "", _api._flag(deterministic, "deterministic"),
        _softcap(softcap), alibi_slopes, sinks)
    return (out, lse) if return_lse else out


def _differentiable(q, k, v, **options):
    """flashcore.attention's route for tensors that require grad."""
    return attention(q, k, v, **options)


def attention_backward(q, k, v, out, dout, lse, *, causal=False, window=(-1, -1), scale=None,
                       exp="exact", cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                       max_seqlen_k=None, threads=None, impl=None, deterministic=False,
                       softcap=None, alibi_slopes=None, sinks=None):
    """flashcore.attention_backward as torch.ops.flashcore.attention_backward: (dq, dk, dv),
    and dsinks with sinks."""
    wl, wr = _api._window(window)
    dq, dk, dv, dsinks = torch.ops.flashcore.attention_backward(
        q, k, v, out, dout, lse, _api._flag(causal, "causal"), wl, wr,
        0.0 if scale is None else _api._scale(scale, 0.0), exp, cu_seqlens_q, cu_seqlens_k,
        max_seqlen_q or 0, max_seqlen_k or 0, _api._threads(threads), _api._impl(impl) or "",
        _api._flag(deterministic, "deterministic"),
        _softcap(softcap), alibi_slopes, sinks)
    return (dq, dk, dv) if sinks is None else (dq, dk, dv, dsinks)


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None, block_table=None,
                           kv_layout="NHD", causal=False, window=(-1, -1), scale=None, return_lse=False,
                           threads=None, k_descale=1.0, v_descale=1.0):
    """flashcore.attention_with_kvcache as torch.ops.flashcore.attention_with_kvcache (see there
    for the arguments; k_descale / v_descale: an fp8 cache's factors, floats or float32
    [B, Hkv] tensors; the caches are declared mutated, so torch.compile orders the append
    before later reads of them). Returns out, or (out, lse); no autograd."""
    wl, wr = _api._window(window)
    kd, kdh = (1.0, k_descale) if isinstance(k_descale, torch.Tensor) else (float(k_descale), None)
    vd, vdh = (1.0, v_descale) if isinstance(v_descale, torch.Tensor) else (float(v_descale), None)
    out, lse = torch.ops.flashcore.attention_with_kvcache(
        q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, kv_layout, _api._flag(causal, "causal"), wl, wr,
        0.0 if scale is None else _api._scale(scale, 0.0), _api._threads(threads), kd, vd, kdh, vdh)
    return (out, lse) if return_lse else out


def softmax_v(s, v, *, scale=1.0, strategy="auto", exp="exact"):
    """flashcore.softmax_v as torch.ops.flashcore.softmax_v."""
    return torch.ops.flashcore.softmax_v(s, v, float(scale), strategy, exp)


def gemm_chain(a, b, c):
    """flashcore.gemm_chain as torch.ops.flashcore.gemm_chain."""
    return torch.ops.flashcore.gemm_chain(a, b, c)
