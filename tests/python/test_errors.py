"""Bad inputs raise ValueError / TypeError naming the argument, before any kernel runs
(the output keeps its poison)."""

import subprocess
import sys

import numpy as np
import pytest

import flashcore


def qkv(b=1, sq=5, sk=6, h=2, hkv=2, d=8, dtype=np.float32):
    rng = np.random.default_rng()
    return (rng.standard_normal((b, sq, h, d)).astype(dtype),
            rng.standard_normal((b, sk, hkv, d)).astype(dtype),
            rng.standard_normal((b, sk, hkv, d)).astype(dtype))


def raises(exc, name, fn, *args, **kw):
    with pytest.raises(exc) as info:
        fn(*args, **kw)
    msg = str(info.value)
    assert msg.startswith(name + ":") or f" {name}" in msg, msg
    return msg


def test_wrong_dtype():
    q, k, v = qkv()
    raises(TypeError, "q", flashcore.attention, q.astype(np.float64), k, v)
    raises(TypeError, "k", flashcore.attention, q, k.astype(np.float16), v)
    raises(TypeError, "v", flashcore.attention, q, k, v.astype(np.int32))
    raises(TypeError, "q", flashcore.attention, q.astype(np.int32), k.astype(np.int32), v.astype(np.int32))
    raises(TypeError, "out", flashcore.attention, q, k, v, out=np.empty(q.shape, np.float16))


def test_not_an_array():
    q, k, v = qkv()
    raises(TypeError, "q", flashcore.attention, "q", k, v)
    raises(TypeError, "k", flashcore.attention, q, [[1.0]], v)
    raises(TypeError, "v", flashcore.attention, q, k, None)
    raises(TypeError, "out", flashcore.attention, q, k, v, out=3)
    raises(TypeError, "a", flashcore.gemm_chain, 1, 2, 3)


def test_wrong_shape():
    q, k, v = qkv()
    raises(ValueError, "q", flashcore.attention, q[0], k, v)
    raises(ValueError, "v", flashcore.attention, q, k, v[0])
    raises(ValueError, "k", flashcore.attention, q, k[:, :, :, :4], v)       # D mismatch
    raises(ValueError, "v", flashcore.attention, q, k, v[:, :5])             # Sk mismatch
    q3, k3, v3 = qkv(h=3, hkv=2)
    raises(ValueError, "k", flashcore.attention, q3, k3, v3)                  # H % Hkv != 0
    raises(ValueError, "out", flashcore.attention, q, k, v, out=np.empty((1, 5, 2, 4), np.float32))
    raises(ValueError, "s", flashcore.softmax_v, np.zeros((2, 3, 4), np.float32), np.zeros((3, 4), np.float32))
    raises(ValueError, "v", flashcore.softmax_v, np.zeros((2, 3), np.float32), np.zeros((4, 4), np.float32))
    raises(ValueError, "b", flashcore.gemm_chain, np.zeros((2, 3), np.float32), np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32))


def test_noncontiguous_last_dim():
    q, k, v = qkv(d=16)
    raises(ValueError, "q", flashcore.attention, q[..., ::2], k[..., ::2].copy(), v)
    raises(ValueError, "v", flashcore.attention, q, k, np.asfortranarray(v))
    out = np.empty((1, 5, 2, 32), np.float32)[..., ::2]
    raises(ValueError, "out", flashcore.attention, q, k, v, out=out)


def test_output_untouched_on_error():
    q, k, v = qkv()
    out = np.full(q.shape, np.nan, np.float32)
    raises(ValueError, "k", flashcore.attention, q, k[:, :, :1], v, out=out)   # Hkv mismatch with v
    raises(ValueError, "window", flashcore.attention, q, k, v, out=out, window=(-2, 0))
    assert np.isnan(out).all()


def test_bad_options():
    q, k, v = qkv()
    raises(ValueError, "strategy", flashcore.attention, q, k, v, strategy="fastest")
    raises(ValueError, "exp", flashcore.attention, q, k, v, exp="approx")
    raises(ValueError, "window", flashcore.attention, q, k, v, window=3)
    raises(ValueError, "window", flashcore.attention, q, k, v, window=(1, -5))
    raises(ValueError, "scale", flashcore.attention, q, k, v, scale=float("nan"))
    raises(TypeError, "scale", flashcore.attention, q, k, v, scale="big")
    raises(ValueError, "scale", flashcore.attention, q, k, v, scale=0.0)
    raises(ValueError, "threads", flashcore.attention, q, k, v, threads=-1)
    raises(TypeError, "impl", flashcore.attention, q, k, v, impl=3)
    raises(ValueError, "impl", flashcore.attention, q, k, v, impl="no_such_kernel")


def test_fp8_descales():
    """q/k/v_descale apply to fp8 inputs only: checked in Python (type, finite, > 0) and
    by the library (1 for any other dtype), naming the argument; the output is untouched."""
    q, k, v = qkv()
    out = np.full(q.shape, np.nan, np.float32)
    raises(ValueError, "q_descale", flashcore.attention, q, k, v, out=out, q_descale=2.0)
    raises(ValueError, "v_descale", flashcore.attention, q, k, v, out=out, v_descale=0.5)
    raises(ValueError, "k_descale", flashcore.attention, q, k, v, out=out, k_descale=-1.0)
    raises(ValueError, "q_descale", flashcore.attention, q, k, v, out=out, q_descale=float("inf"))
    raises(TypeError, "v_descale", flashcore.attention, q, k, v, out=out, v_descale="x")
    assert np.isnan(out).all()
    # 1.0 (the default, also when given) runs as before
    o1 = flashcore.attention(q, k, v)
    o2 = flashcore.attention(q, k, v, q_descale=1.0, k_descale=1, v_descale=1.0)
    np.testing.assert_array_equal(o1, o2)
    # Per-head arrays [B, Hkv]: float32, that shape, contiguous (Python), fp8 only (library)
    b, hkv = q.shape[0], k.shape[2]
    heads = np.ones((b, hkv), np.float32)
    msg = raises(ValueError, "k_descale_heads", flashcore.attention, q, k, v, out=out, k_descale=heads)
    assert "per-head descales apply to fp8" in msg, msg
    msg = raises(TypeError, "q_descale", flashcore.attention, q, k, v, out=out,
                 q_descale=heads.astype(np.float64))
    assert "float64" in msg, msg
    msg = raises(ValueError, "v_descale", flashcore.attention, q, k, v, out=out,
                 v_descale=np.ones((b, hkv + 1), np.float32))
    assert "shape [B, Hkv]" in msg, msg
    msg = raises(ValueError, "q_descale", flashcore.attention, q, k, v, out=out,
                 q_descale=np.ones((b, 2 * hkv), np.float32)[:, ::2])
    assert "contiguous" in msg, msg
    assert np.isnan(out).all()


def test_bad_varlen():
    q, k, v = qkv(sq=10, sk=10)
    cu = np.array([0, 4, 10], np.int32)
    raises(TypeError, "cu_seqlens_q", flashcore.attention, q, k, v, cu_seqlens_q=cu.astype(np.int64), cu_seqlens_k=cu)
    raises(ValueError, "cu_seqlens_k", flashcore.attention, q, k, v, cu_seqlens_q=cu)
    raises(ValueError, "cu_seqlens_q", flashcore.attention, q, k, v, cu_seqlens_q=np.array([1, 4, 10], np.int32), cu_seqlens_k=cu)
    raises(ValueError, "cu_seqlens_k", flashcore.attention, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=np.array([0, 6, 4], np.int32))
    raises(ValueError, "cu_seqlens_q", flashcore.attention, q, k, v, cu_seqlens_q=np.array([0, 4, 11], np.int32), cu_seqlens_k=cu)
    raises(ValueError, "cu_seqlens_k", flashcore.attention, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=np.array([0, 10], np.int32))
    # Bounds of the longest sequences (6 here): below it, one without the other, not an int, without varlen.
    raises(ValueError, "max_seqlen_q", flashcore.attention, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=6)
    raises(ValueError, "max_seqlen_k", flashcore.attention, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=6)
    raises(TypeError, "max_seqlen_q", flashcore.attention, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q="6", max_seqlen_k=6)
    raises(ValueError, "max_seqlen_q", flashcore.attention, q, k, v, max_seqlen_q=6, max_seqlen_k=6)
    q2, k2, v2 = qkv(b=2)
    raises(ValueError, "q", flashcore.attention, q2, k2, v2, cu_seqlens_q=cu, cu_seqlens_k=cu)


def test_aliasing_and_readonly():
    q, k, v = qkv()
    raises(ValueError, "out", flashcore.attention, q, k, v, out=q)
    ro = np.empty(q.shape, np.float32)
    ro.flags.writeable = False
    raises(ValueError, "out", flashcore.attention, q, k, v, out=ro)
    # Read-only inputs are fine.
    q.flags.writeable = False
    flashcore.attention(q, k, v)


def test_softmax_v_and_gemm_chain_dtypes():
    s = np.zeros((3, 4), np.float16)
    v = np.zeros((4, 2), np.float32)
    raises(TypeError, "s", flashcore.softmax_v, s, v)
    raises(TypeError, "out", flashcore.softmax_v, s.astype(np.float32), v, out=np.empty((3, 2), np.float16))
    a = np.zeros((2, 3), np.float32)
    raises(TypeError, "b", flashcore.gemm_chain, a, np.zeros((3, 3), np.float16), np.zeros((3, 3), np.float32))


def test_import_does_not_import_torch():
    code = "import sys, flashcore; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_options_of_the_wrong_kind_are_refused():
    """Options are taken for what they are, not for their truth value or their text."""
    q, k, v = qkv()
    out = np.full((1, 5, 2, 8), np.nan, np.float32)
    raises(TypeError, "causal", flashcore.attention, q, k, v, causal="no", out=out)
    raises(TypeError, "causal", flashcore.attention, q, k, v, causal=2, out=out)
    raises(TypeError, "return_lse", flashcore.attention, q, k, v, return_lse="yes", out=out)
    raises(TypeError, "exact_fp32", flashcore.attention, q, k, v, exact_fp32=[1], out=out)
    raises(TypeError, "scale", flashcore.attention, q, k, v, scale="0.5", out=out)
    raises(TypeError, "scale", flashcore.attention, q, k, v, scale=True, out=out)
    raises(ValueError, "impl", flashcore.attention, q, k, v, impl="f32_4x16_generic\0junk", out=out)
    assert np.isnan(out).all()
    # numpy bools and the ints 0 / 1 are booleans
    flashcore.attention(q, k, v, causal=np.bool_(True), out=out)
    flashcore.attention(q, k, v, causal=1, out=out)


def test_scale_that_float32_cannot_hold():
    """0 < |scale| < 1.4e-45 becomes 0 in float32, which the library reads as 'default':
    refused instead; so is a scale that overflows float32."""
    q, k, v = qkv()
    out = np.full((1, 5, 2, 8), np.nan, np.float32)
    raises(ValueError, "scale", flashcore.attention, q, k, v, scale=1e-46, out=out)
    raises(ValueError, "scale", flashcore.attention, q, k, v, scale=-1e-50, out=out)
    raises(ValueError, "scale", flashcore.attention, q, k, v, scale=1e39, out=out)
    raises(ValueError, "scale", flashcore.attention, q, k, v, scale=0.0, out=out)
    assert np.isnan(out).all()
    flashcore.attention(q, k, v, scale=1e-44, out=out)  # a float32 subnormal: kept
    assert np.isfinite(out).all()


def test_threads_beyond_the_machine():
    q, k, v = qkv()
    out = np.full((1, 5, 2, 8), np.nan, np.float32)
    raises(ValueError, "threads", flashcore.attention, q, k, v, threads=1 << 24, out=out)
    assert np.isnan(out).all()


def test_varlen_rows_past_the_last_sequence_are_defined():
    """cu_seqlens_q[-1] below the packed rows: those rows belong to no sequence; an output
    the library allocates is 0 there and its lse -inf."""
    rng = np.random.default_rng()
    q = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
    v = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
    cu = np.array([0, 3, 6], np.int32)
    out, lse = flashcore.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, return_lse=True)
    assert (out[:, 6:] == 0).all()
    assert np.isneginf(lse[:, :, 6:]).all()
    assert np.isfinite(out[:, :6]).all() and np.isfinite(lse[:, :, :6]).all()


def test_cu_seqlens_inside_out_is_refused():
    """An int32 cu_seqlens view into out's own buffer would be rewritten by the kernel."""
    rng = np.random.default_rng()
    q = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
    v = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
    out = np.full((1, 9, 2, 8), np.nan, np.float32)
    cu = out.reshape(-1).view(np.int32)[:3]
    cu[:] = [0, 4, 9]
    raises(ValueError, "out", flashcore.attention, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu.copy(), out=out)
    assert (out.reshape(-1).view(np.int32)[:3] == [0, 4, 9]).all()
