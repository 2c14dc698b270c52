"""attention_backward from Python: numpy, torch (autograd, torch.compile, gradcheck) and JAX.

The truth is tests/python/reference.py's float64 numpy backward (written from the
definitions, independent of the library); the library's own fp64 reference backward
(flashcore._api._REFERENCE_BACKWARD) is checked by torch.autograd.gradcheck in float64
against an independent float64 torch forward.
"""
import numpy as np
import pytest

import flashcore
from flashcore import _api

import reference as ref
from conftest import TOL, np_dtype, qkv_case as _case


def _check(got, want, tol):
    for g, w, name in zip(got, want, ("dq", "dk", "dv")):
        err = ref.rel_err(np.asarray(g, dtype=np.float64), w)
        assert err <= tol, f"{name}: rel_err {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("mask", [{}, {"causal": True}, {"window": (5, 3)}, {"causal": True, "scale": -0.4}])
def test_numpy_matches_reference(rng, dtype, mask):
    dt = np_dtype(dtype)
    q, k, v, dout = _case(rng, dt, sq=61 if mask.get("causal") else 37)  # causal Sq > Sk: masked rows
    out, lse = flashcore.attention(q, k, v, return_lse=True, **mask)
    dq, dk, dv = flashcore.attention_backward(q, k, v, out, dout, lse, **mask)
    assert dq.dtype == dt and dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    _check((dq, dk, dv), ref.attention_backward(q, k, v, dout, **mask), TOL[dtype])
    # Rows that see no key (lse = -inf): dq exactly 0.
    masked = np.isneginf(lse)
    assert np.all(np.asarray(dq, np.float64).transpose(0, 2, 1, 3)[masked] == 0)


def test_numpy_gqa8_strided_outputs_and_threads(rng):
    q, k, v, dout = _case(rng, np.float32, b=1, sq=130, sk=70, h=8, hkv=1, d=40, dv=40)
    out, lse = flashcore.attention(q, k, v, return_lse=True, causal=True)
    # gradients into BHSD views with padded rows (strided; contiguous last dim)
    dq = np.full((1, 8, 130, 48), np.nan, np.float32)[..., :40].transpose(0, 2, 1, 3)
    dk = np.full((1, 1, 70, 40), np.nan, np.float32).transpose(0, 2, 1, 3)
    dv = np.full((1, 1, 70, 40), np.nan, np.float32).transpose(0, 2, 1, 3)
    got = flashcore.attention_backward(q, k, v, out, dout, lse, causal=True, threads=3, dq=dq, dk=dk, dv=dv)
    assert got[0] is dq and got[1] is dk and got[2] is dv
    _check(got, ref.attention_backward(q, k, v, dout, causal=True), 1e-5)


def test_numpy_varlen(rng):
    cu_q = np.array([0, 7, 7, 40], np.int32)
    cu_k = np.array([0, 11, 20, 55], np.int32)
    q, k, v, dout = _case(rng, np.float32, b=1, sq=44, sk=60, h=4, hkv=2, d=16, dv=16)
    kw = {"causal": True, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    out, lse = flashcore.attention(q, k, v, return_lse=True, **kw)
    out[:, 40:], lse[:, :, 40:] = 0, 0  # rows past the last sequence: the forward leaves them
    got = flashcore.attention_backward(q, k, v, out, dout, lse, **kw)
    want = ref.attention_backward_varlen(q, k, v, dout, cu_q, cu_k, causal=True)
    _check(got, want, 1e-5)
    assert np.all(got[0][:, 40:] == 0) and np.all(got[1][:, 55:] == 0)


def test_deterministic_bits(rng):
    q, k, v, dout = _case(rng, np.float32, b=1, sq=300, sk=400, h=4, hkv=1, d=32, dv=32)
    out, lse = flashcore.attention(q, k, v, return_lse=True)
    runs = [flashcore.attention_backward(q, k, v, out, dout, lse, deterministic=True, threads=t) for t in (1, 2, 3)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_bad_arguments_named(rng):
    q, k, v, dout = _case(rng, np.float32, b=1, sq=9, sk=11, h=2, hkv=1, d=8, dv=8)
    out, lse = flashcore.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="^dout: dim 1"):
        flashcore.attention_backward(q, k, v, out, dout[:, :8], lse)
    with pytest.raises(TypeError, match="^lse: must be float32"):
        flashcore.attention_backward(q, k, v, out, dout, lse.astype(np.float16))
    with pytest.raises(TypeError, match="^dout: dtype"):
        flashcore.attention_backward(q, k, v, out, dout.astype(np.float16), lse)
    buf = np.full((1, 20, 2, 8), np.nan, np.float32)
    with pytest.raises(ValueError, match="^dk: overlaps dq"):
        flashcore.attention_backward(q, k, v, out, dout, lse, dq=buf[:, :9], dk=buf[:, 5:16, :1])
    assert np.isnan(buf).all()
    with pytest.raises(ValueError, match="^dq: overlaps q"):
        flashcore.attention_backward(q, k, v, out, dout, lse, dq=q)
    with pytest.raises(ValueError, match="^window"):
        flashcore.attention_backward(q, k, v, out, dout, lse, window=(1,))


# ---------------------------------------------------------------- torch
torch = pytest.importorskip("torch")
TORCH_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _t(x, dtype, requires_grad=False):
    return torch.tensor(np.asarray(x, np.float32)).to(TORCH_DT[dtype]).requires_grad_(requires_grad)


def _np(x):
    return x.detach().to(torch.float64).numpy()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_autograd_matches_reference(rng, dtype, causal):
    qn, kn, vn, don = _case(rng, np.float32, sq=45)
    q, k, v = (_t(x, dtype, True) for x in (qn, kn, vn))
    dout = _t(don, dtype)
    out = flashcore.attention(q, k, v, causal=causal)
    assert out.requires_grad and out.grad_fn is not None
    out.backward(dout)
    want = ref.attention_backward(*(_np(x) for x in (q, k, v, dout)), causal=causal)
    _check((_np(q.grad), _np(k.grad), _np(v.grad)), want, TOL[dtype])


def test_torch_autograd_bhsd_views_sum_loss_and_lse(rng):
    """BHSD views in, a loss whose dout is an expanded (zero-stride) tensor, return_lse."""
    q = torch.randn(1, 4, 33, 16, dtype=torch.float32).transpose(1, 2).requires_grad_()
    k = torch.randn(1, 2, 40, 16).transpose(1, 2).requires_grad_()
    v = torch.randn(1, 2, 40, 16).transpose(1, 2).requires_grad_()
    out, lse = flashcore.attention(q, k, v, window=(7, 2), return_lse=True)
    assert not lse.requires_grad
    out.sum().backward()
    want = ref.attention_backward(_np(q), _np(k), _np(v), np.ones(out.shape), window=(7, 2))
    _check((_np(q.grad), _np(k.grad), _np(v.grad)), want, 1e-5)


def test_torch_autograd_varlen_and_options(rng):
    cu_q = torch.tensor([0, 5, 30], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 41], dtype=torch.int32)
    q = torch.randn(1, 30, 4, 16, requires_grad=True)
    k = torch.randn(1, 41, 1, 16, requires_grad=True)
    v = torch.randn(1, 41, 1, 16, requires_grad=True)
    kw = {"causal": True, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    out = flashcore.attention(q, k, v, threads=2, **kw)
    dout = torch.randn_like(out)
    out.backward(dout)
    want = ref.attention_backward_varlen(_np(q), _np(k), _np(v), _np(dout), cu_q.numpy(), cu_k.numpy(), causal=True)
    _check((_np(q.grad), _np(k.grad), _np(v.grad)), want, 1e-5)


def test_torch_out_refused_with_grad():
    q = torch.randn(1, 5, 2, 8, requires_grad=True)
    with pytest.raises(ValueError, match="^out:"):
        flashcore.attention(q, q, q, out=torch.empty(1, 5, 2, 8))
    with torch.no_grad():  # no autograd: out= is fine
        out = torch.empty(1, 5, 2, 8)
        assert flashcore.attention(q, q, q, out=out) is out


def test_torch_attention_backward_function(rng):
    qn, kn, vn, don = _case(rng, np.float32)
    q, k, v, dout = (_t(x, "f32") for x in (qn, kn, vn, don))
    out, lse = flashcore.attention(q, k, v, return_lse=True)
    dq, dk, dv = flashcore.attention_backward(q, k, v, out, dout, lse, deterministic=True)
    assert isinstance(dq, torch.Tensor) and dq.shape == q.shape and dv.dtype == torch.float32
    _check((_np(dq), _np(dk), _np(dv)), ref.attention_backward(qn, kn, vn, don), 1e-5)


def _torch_attention_f64(q, k, v, causal=False, window=(-1, -1)):
    """softmax(Q K^T / sqrt(D) + mask) V in float64 torch ops (bottom-right masks, GQA)."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    kk, vv = k.repeat_interleave(h // hkv, dim=2), v.repeat_interleave(h // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) / d ** 0.5
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    left, right = window
    right = 0 if causal else right
    mask = torch.ones(sq, sk, dtype=torch.bool)
    if right >= 0:
        mask &= j <= i + sk - sq + right
    if left >= 0:
        mask &= j >= i + sk - sq - left
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


class _ReferenceAttention(torch.autograd.Function):
    """Forward: float64 torch ops; backward: the library's fp64 reference backward
    (computes in float64 from float32 copies of the inputs)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, window):
        ctx.save_for_backward(q, k, v)
        ctx.opts = (causal, window)
        return _torch_attention_f64(q, k, v, causal, window)

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors
        causal, window = ctx.opts
        f32 = [x.detach().float().contiguous() for x in (q, k, v, dout)]
        b, sq, h, _ = q.shape
        out = torch.zeros(f32[3].shape)                    # checked, not read
        lse = torch.zeros(b, h, sq)                        # checked, not read
        grads = _api._backward(f32[0], f32[1], f32[2], out, f32[3], lse, reference=True, causal=causal,
                               window=window)
        return tuple(g.double() for g in grads) + (None, None)


@pytest.mark.parametrize("causal,window,shape", [
    (False, (-1, -1), (1, 3, 5, 2, 1, 4)),
    (True, (-1, -1), (2, 6, 4, 2, 2, 3)),   # Sq > Sk: two fully masked rows
    (False, (1, 2), (1, 5, 7, 4, 2, 3)),
])
def test_gradcheck_float64_reference_backward(causal, window, shape):
    """gradcheck in float64 (its default eps and tolerances): the library's fp64 reference
    backward against finite differences of an independent float64 forward. The reference
    takes float32 tensors, so its gradients carry the float32 rounding of the inputs and
    outputs (~1e-7 relative), far inside gradcheck's atol 1e-5 / rtol 1e-3."""
    b, sq, sk, h, hkv, d = shape
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence().entropy % 2**31))
    q = torch.randn(b, sq, h, d, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(b, sk, hkv, d, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(b, sk, hkv, d, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *x: _ReferenceAttention.apply(*x, causal, window), (q, k, v))


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")
def test_gradcheck_float32_kernels():
    """gradcheck of the real (fp32) kernels through flashcore.attention's autograd: eps 1e-3
    so that the float32 rounding of the forward (~1e-7) stays ~1e-4 of each difference."""
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence().entropy % 2**31))
    q, k, v = (torch.randn(1, 6, 2, 4, generator=gen, requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: flashcore.attention(q, k, v, causal=True, window=(3, -1))
    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-3, atol=2e-3, rtol=1e-2, nondet_tol=0.0)


def test_kernels_match_reference_backward_float32(rng):
    """The real kernels against the library's fp64 reference (same inputs, float32)."""
    qn, kn, vn, don = _case(rng, np.float32, b=1, sq=70, sk=90, h=4, hkv=1, d=24, dv=24)
    out, lse = flashcore.attention(qn, kn, vn, return_lse=True, causal=True)
    got = flashcore.attention_backward(qn, kn, vn, out, don, lse, causal=True)
    want = _api._backward(qn, kn, vn, out, don, lse, reference=True, causal=True)
    _check(got, [np.asarray(w, np.float64) for w in want], 1e-5)


def test_torch_compile_fullgraph_forward_and_backward(rng):
    import flashcore.torch as fct

    def step(q, k, v):
        return fct.attention(q, k, v, causal=True).square().sum()

    compiled = torch.compile(step, fullgraph=True)
    q, k, v = (torch.randn(1, 24, 2, 16, requires_grad=True) for _ in range(3))
    loss = compiled(q, k, v)
    loss.backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    step(q, k, v).backward()
    for g, x in zip(grads, (q, k, v)):
        assert torch.allclose(g, x.grad, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- JAX (DLPack, CPU)
def test_jax_attention_backward(rng):
    jax = pytest.importorskip("jax")
    cpu = jax.devices("cpu")[0]
    qn, kn, vn, don = _case(rng, np.float32)
    q, k, v, dout = (jax.device_put(x, cpu) for x in (qn, kn, vn, don))
    out, lse = flashcore.attention(q, k, v, return_lse=True, causal=True)
    dq, dk, dv = flashcore.attention_backward(q, k, v, out, dout, lse, causal=True)
    assert isinstance(dq, jax.Array) and dq.shape == q.shape
    _check((np.asarray(dq), np.asarray(dk), np.asarray(dv)),
           ref.attention_backward(qn, kn, vn, don, causal=True), 1e-5)
