"""The score variants (softcap, alibi_slopes, sinks) from Python: numpy forward and backward
against tests/python/reference.py's float64 numpy definitions, torch autograd through the
variants (the sinks' gradient included), gradcheck of the library's fp64 reference backward
with the variants against an independent float64 torch forward, torch.compile, and the
argument errors."""
import numpy as np
import pytest

import flashcore
from flashcore import _api

import reference as ref
from conftest import FAST_EXP_TOL, TOL, np_dtype, qkv_case as _case


def _variants(rng, kinds, b, h):
    """The variant options: softcap, slopes [H] or [B, H], sinks, as `kinds` names them."""
    kw = {}
    if "softcap" in kinds:
        kw["softcap"] = 2.5
    if "alibi" in kinds:
        kw["alibi_slopes"] = rng.uniform(0, 0.4, (h,)).astype(np.float32)
    if "alibi_bh" in kinds:
        kw["alibi_slopes"] = rng.uniform(0, 0.4, (b, h)).astype(np.float32)
    if "sinks" in kinds:
        kw["sinks"] = rng.uniform(-1, 3, (h,)).astype(np.float32)
    return kw


def _rel(got, want, name, tol):
    err = ref.rel_err(np.asarray(got, np.float64), want)
    assert err <= tol, f"{name}: rel_err {err:.2e} > {tol:.0e}"


def _check_dsinks(got, want, sinks, out, dout, lse, tol):
    """dsinks_h = -sum_i exp(sink_h - lse_i) dout_i . out_i: within tol of the sum of the terms'
    magnitudes (the sum itself may cancel to ~0; out is the stored, rounded one)."""
    o, do, l = (np.asarray(x, np.float64) for x in (out, dout, lse))
    w = np.where(np.isfinite(l), np.exp(np.asarray(sinks, np.float64)[None, :, None] - np.where(np.isfinite(l), l, 0)), 0)
    mag = (w * np.abs(do * o).sum(axis=-1).transpose(0, 2, 1)).sum(axis=(0, 2))
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= tol * mag), f"dsinks: errors {err} > {tol:.0e} x {mag}"


KINDS = [("softcap",), ("alibi",), ("alibi_bh",), ("sinks",), ("softcap", "alibi_bh", "sinks")]
MASKS = [{}, {"causal": True}, {"window": (6, 2)}]


@pytest.mark.parametrize("kinds", KINDS, ids="+".join)
@pytest.mark.parametrize("mask", MASKS, ids=["none", "causal", "window"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_numpy_forward_and_backward(rng, kinds, mask, dtype):
    dt = np_dtype(dtype)
    q, k, v, dout = _case(rng, dt, sq=61 if mask else 37)  # Sq > Sk with a mask: masked rows
    kw = dict(mask, **_variants(rng, kinds, 2, 4))
    out, lse = flashcore.attention(q, k, v, return_lse=True, **kw)
    want_out, want_lse = ref.attention(q, k, v, **kw)
    _rel(out, want_out, "out", TOL[dtype])
    finite = np.isfinite(want_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.max(np.abs(lse[finite] - want_lse[finite])) <= 10 * TOL[dtype] * (1 + np.max(np.abs(want_lse[finite])))
    if "sinks" in kinds:  # rows that see no key: O = 0, lse = the sink
        masked = ~np.isfinite(ref.attention(q, k, v, **mask)[1])
        assert np.all(np.asarray(out, np.float64).transpose(0, 2, 1, 3)[masked] == 0)
        assert np.array_equal(lse[masked], np.broadcast_to(kw["sinks"][None, :, None], lse.shape)[masked])
    got = flashcore.attention_backward(q, k, v, out, dout, lse, **kw)
    want = ref.attention_backward(q, k, v, dout, **kw)
    assert len(got) == (4 if "sinks" in kinds else 3)
    for g, w, name in zip(got[:3], want, ("dq", "dk", "dv")):
        _rel(g, w, name, TOL[dtype])
    if "sinks" in kinds:
        _check_dsinks(got[3], want[3], kw["sinks"], out, dout, lse, TOL[dtype])


def test_numpy_varlen_decode_and_fast_exp(rng):
    """Varlen (slopes per sequence, a sequence without queries, one without keys), the decode
    path, and exp='fast'."""
    cu_q = np.array([0, 1, 1, 3, 4], np.int32)
    cu_k = np.array([0, 300, 301, 700, 700], np.int32)
    q, k, v, dout = _case(rng, np.float32, b=1, sq=4, sk=700, h=4, hkv=2, d=32, dv=32)
    kw = dict(_variants(rng, ("softcap", "alibi_bh", "sinks"), 4, 4), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    opts = {k_: v_ for k_, v_ in kw.items() if not k_.startswith("cu_")}
    want_out, want_lse = ref.attention_varlen(q, k, v, cu_q, cu_k, **opts)
    for exp, tol in (("fast", FAST_EXP_TOL), ("exact", 1e-5)):  # (the backward takes the exact forward)
        out, lse = flashcore.attention(q, k, v, return_lse=True, exp=exp, **kw)
        _rel(out, want_out, f"out ({exp})", tol)
    assert np.array_equal(lse[0, :, 3], kw["sinks"])  # the last sequence has no keys
    got = flashcore.attention_backward(q, k, v, out, dout, lse, **kw)
    want = ref.attention_backward_varlen(q, k, v, dout, cu_q, cu_k, **opts)
    for g, w, name in zip(got[:3], want, ("dq", "dk", "dv")):
        _rel(g, w, name, 1e-5)
    _check_dsinks(got[3], want[3], kw["sinks"], out, dout, lse, 1e-5)


def test_bad_arguments_named(rng):
    q, k, v, dout = _case(rng, np.float32, b=1, sq=9, sk=11, h=2, hkv=1, d=8, dv=8)
    with pytest.raises(ValueError, match="^softcap: must be finite and >= 0"):
        flashcore.attention(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match="^softcap: must be finite"):
        flashcore.attention(q, k, v, softcap=float("nan"))
    with pytest.raises(ValueError, match="^alibi_slopes: dim 0 \\(H\\)"):
        flashcore.attention(q, k, v, alibi_slopes=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="^sinks: expected rank 1"):
        flashcore.attention(q, k, v, sinks=np.zeros((1, 2), np.float32))
    with pytest.raises(TypeError, match="^sinks: dtype f16 is not f32"):
        flashcore.attention(q, k, v, sinks=np.zeros(2, np.float16))
    out, lse = flashcore.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="^dsinks: given without sinks"):
        flashcore.attention_backward(q, k, v, out, dout, lse, dsinks=np.zeros(2, np.float32))
    sinks = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match="^dsinks: overlaps params.sinks"):
        flashcore.attention_backward(q, k, v, out, dout, lse, sinks=sinks, dsinks=sinks)


# ---------------------------------------------------------------- torch
torch = pytest.importorskip("torch")


def _np(x):
    return x.detach().to(torch.float64).numpy()


@pytest.mark.parametrize("kinds", KINDS, ids="+".join)
def test_torch_autograd_through_variants(rng, kinds):
    """out backpropagates into q, k, v and the sinks (torch.ops.flashcore.attention)."""
    qn, kn, vn, don = _case(rng, np.float32, sq=45)
    q, k, v = (torch.tensor(x, requires_grad=True) for x in (qn, kn, vn))
    kw = {n: (torch.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in _variants(rng, kinds, 2, 4).items()}
    if "sinks" in kw:
        kw["sinks"].requires_grad_()
    out = flashcore.attention(q, k, v, causal=True, **kw)
    out.backward(torch.tensor(don))
    want = ref.attention_backward(qn, kn, vn, don, causal=True,
                                  **{n: (_np(x) if isinstance(x, torch.Tensor) else x) for n, x in kw.items()})
    for g, w, name in zip((q.grad, k.grad, v.grad), want, ("dq", "dk", "dv")):
        _rel(_np(g), w, name, 1e-5)
    if "sinks" in kw:
        np_kw = {n: (_np(x).astype(np.float32) if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
        out_np, lse_np = flashcore.attention(qn, kn, vn, causal=True, return_lse=True, **np_kw)
        _check_dsinks(_np(kw["sinks"].grad), want[3], np_kw["sinks"], out_np, don, lse_np, 1e-5)


def test_torch_sinks_gradient_alone(rng):
    """Only the sinks require grad (q, k, v do not): the sinks still get their gradient."""
    qn, kn, vn, don = _case(rng, np.float32, b=1, sq=30, sk=20, h=2, hkv=1, d=16, dv=16)
    sinks = torch.tensor([0.5, -1.0], requires_grad=True)
    out = flashcore.attention(torch.tensor(qn), torch.tensor(kn), torch.tensor(vn), causal=True, sinks=sinks)
    assert out.requires_grad
    out.backward(torch.tensor(don))
    want = ref.attention_backward(qn, kn, vn, don, causal=True, sinks=_np(sinks))[3]
    out_np, lse_np = flashcore.attention(qn, kn, vn, causal=True, return_lse=True, sinks=_np(sinks).astype(np.float32))
    _check_dsinks(_np(sinks.grad), want, _np(sinks), out_np, don, lse_np, 1e-5)


def _torch_attention_f64(q, k, v, causal, softcap, slopes, sinks):
    """The forward with the variants in float64 torch ops (independent of the library)."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    kk, vv = k.repeat_interleave(h // hkv, dim=2), v.repeat_interleave(h // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) / d ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    if slopes is not None:
        s = s - slopes.reshape(-1, h)[:, :, None, None] * (i + sk - sq - j).abs()
    if causal:
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    if sinks is not None:  # a column of sink logits in the softmax, dropped after it
        s = torch.cat([s, sinks.reshape(1, h, 1, 1).expand(b, h, sq, 1)], dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


class _ReferenceAttention(torch.autograd.Function):
    """Forward: float64 torch ops; backward: the library's fp64 reference backward with the
    variants (from float32 copies of the inputs)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, causal, softcap, slopes):
        ctx.save_for_backward(q, k, v, sinks)
        ctx.opts = (causal, softcap, slopes)
        return _torch_attention_f64(q, k, v, causal, softcap, slopes, sinks)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks = ctx.saved_tensors
        causal, softcap, slopes = ctx.opts
        f32 = [x.detach().float().contiguous() for x in (q, k, v, dout)]
        b, sq, h, _ = q.shape
        grads = _api._backward(f32[0], f32[1], f32[2], torch.zeros(f32[3].shape), f32[3], torch.zeros(b, h, sq),
                               reference=True, causal=causal, softcap=softcap,
                               alibi_slopes=None if slopes is None else slopes.float(), sinks=sinks.detach().float())
        return tuple(g.double() for g in grads) + (None, None, None)


@pytest.mark.parametrize("causal,shape,softcap,alibi", [
    (False, (1, 3, 5, 2, 1, 4), 1.5, False),
    (True, (2, 6, 4, 2, 2, 3), None, True),   # Sq > Sk: two fully masked rows, their lse = the sink
    (True, (1, 5, 7, 4, 2, 3), 0.8, True),
])
def test_gradcheck_float64_reference_backward(causal, shape, softcap, alibi):
    """gradcheck in float64 (default eps and tolerances): the library's fp64 reference backward
    with the variants, the sinks' gradient included, against finite differences of an
    independent float64 forward."""
    b, sq, sk, h, hkv, d = shape
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence().entropy % 2**31))
    q = torch.randn(b, sq, h, d, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(b, sk, hkv, d, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(b, sk, hkv, d, dtype=torch.float64, generator=gen, requires_grad=True)
    # float32-exact sinks and slopes: the reference reads them as float32
    sinks = (torch.randn(h, dtype=torch.float64, generator=gen).float().double()).requires_grad_()
    slopes = torch.rand(b, h, dtype=torch.float64, generator=gen).float().double() if alibi else None
    assert torch.autograd.gradcheck(lambda *x: _ReferenceAttention.apply(*x, causal, softcap, slopes),
                                    (q, k, v, sinks))


def test_torch_compile_fullgraph_with_variants():
    import flashcore.torch as fct

    slopes = torch.rand(2) * 0.3

    def step(q, k, v, sinks):
        return fct.attention(q, k, v, causal=True, softcap=3.0, alibi_slopes=slopes, sinks=sinks).square().sum()

    compiled = torch.compile(step, fullgraph=True)
    q, k, v = (torch.randn(1, 24, 2, 16, requires_grad=True) for _ in range(3))
    sinks = torch.zeros(2, requires_grad=True)
    compiled(q, k, v, sinks).backward()
    grads = [x.grad.clone() for x in (q, k, v, sinks)]
    for x in (q, k, v, sinks):
        x.grad = None
    step(q, k, v, sinks).backward()
    for g, x in zip(grads, (q, k, v, sinks)):
        assert torch.allclose(g, x.grad, rtol=1e-5, atol=1e-6)
