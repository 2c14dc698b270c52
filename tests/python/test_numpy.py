"""numpy CPU arrays against the float64 reference in reference.py."""

import numpy as np
import pytest

import flashcore
import reference as ref
from conftest import FAST_EXP_TOL, TOL, np_dtype, randn

STRATEGIES = ["auto", "two-pass", "three-pass", "online"]

# (B, Sq, Sk, H, Hkv, D, Dv): odd sizes, GQA/MQA, Sq != Sk both ways, D != Dv.
SHAPES = [
    (1, 1, 1, 1, 1, 8, 8),
    (2, 7, 63, 4, 2, 16, 16),
    (1, 63, 7, 3, 1, 32, 24),
    (3, 33, 65, 2, 2, 64, 64),
]


def check_attention(rng, shape, dtype, *, strategy="auto", exp="exact", causal=False,
                    window=(-1, -1), scale=None):
    b, sq, sk, h, hkv, d, dv = shape
    dt = np_dtype(dtype)
    q = randn(rng, (b, sq, h, d), dt)
    k = randn(rng, (b, sk, hkv, d), dt)
    v = randn(rng, (b, sk, hkv, dv), dt)
    out, lse = flashcore.attention(q, k, v, causal=causal, window=window, scale=scale,
                                   strategy=strategy, exp=exp, return_lse=True)
    assert out.shape == (b, sq, h, dv) and out.dtype == dt
    assert lse.shape == (b, h, sq) and lse.dtype == np.float32
    o_ref, lse_ref = ref.attention(q, k, v, causal=causal, window=window, scale=scale)
    tol = FAST_EXP_TOL if exp == "fast" else TOL[dtype]
    assert ref.rel_err(out, o_ref) <= max(tol, 1e-5 if dtype == "f32" else tol)
    # lse: -inf exactly where the whole row is masked, close elsewhere.
    finite = np.isfinite(lse_ref)
    assert np.array_equal(np.isfinite(lse), finite)
    assert (lse[~finite] == -np.inf).all()
    if finite.any():
        # f16/bf16 kernels may round scores to the storage type (AVX512-FP16 paths do).
        lse_tol = FAST_EXP_TOL if exp == "fast" else {"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2}[dtype]
        assert np.abs(lse[finite] - lse_ref[finite]).max() <= lse_tol * max(1.0, np.abs(lse_ref[finite]).max())
    return out


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_attention(rng, shape, dtype, strategy, causal):
    check_attention(rng, shape, dtype, strategy=strategy, causal=causal)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_attention_fast_exp(rng, strategy, dtype):
    check_attention(rng, (2, 17, 40, 4, 1, 32, 32), dtype, strategy=strategy, exp="fast", causal=True)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_attention_long(rng, dtype):
    check_attention(rng, (1, 1000, 1000, 1, 1, 64, 64), dtype, causal=True)


@pytest.mark.parametrize("window", [(3, 2), (0, 0), (5, -1), (-1, 4)])
@pytest.mark.parametrize("sq_sk", [(20, 20), (9, 30), (30, 9)])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_attention_window(rng, window, sq_sk, strategy):
    sq, sk = sq_sk
    check_attention(rng, (1, sq, sk, 2, 1, 16, 16), "f32", window=window, strategy=strategy)


def test_attention_causal_window(rng):
    check_attention(rng, (2, 25, 31, 2, 2, 16, 16), "f32", causal=True, window=(4, -1))


def test_attention_scale(rng):
    check_attention(rng, (1, 9, 11, 2, 2, 16, 16), "f32", scale=0.37)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_attention_negative_scale(rng, strategy):
    check_attention(rng, (1, 9, 300, 2, 2, 16, 16), "f32", scale=-1.5, strategy=strategy,
                    causal=True)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_varlen(rng, strategy, causal):
    cu_q = np.array([0, 3, 10, 10, 27], dtype=np.int32)
    cu_k = np.array([0, 5, 9, 14, 40], dtype=np.int32)
    h, hkv, d = 4, 2, 16
    q = randn(rng, (1, 27, h, d), np.float32)
    k = randn(rng, (1, 40, hkv, d), np.float32)
    v = randn(rng, (1, 40, hkv, d), np.float32)
    out, lse = flashcore.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   causal=causal, strategy=strategy, return_lse=True)
    o_ref, lse_ref = ref.attention_varlen(q, k, v, cu_q, cu_k, causal=causal)
    assert ref.rel_err(out, o_ref) <= 1e-5
    finite = np.isfinite(lse_ref)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.abs(lse[finite] - lse_ref[finite]).max() <= 1e-4
    # With bounds of the longest sequences (17 queries, 26 keys; k's loose): the same.
    out2 = flashcore.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=causal,
                               strategy=strategy, max_seqlen_q=17, max_seqlen_k=30)
    assert np.array_equal(out2, out)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_attention_bhsd_strides_and_out(rng, dtype):
    """BHSD memory through transposed views, for inputs and for out=."""
    dt = np_dtype(dtype)
    b, h, hkv, sq, sk, d = 2, 4, 2, 13, 21, 32
    q_bhsd = randn(rng, (b, h, sq, d), dt)
    k_bhsd = randn(rng, (b, hkv, sk, d), dt)
    v_bhsd = randn(rng, (b, hkv, sk, d), dt)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q_bhsd, k_bhsd, v_bhsd))
    assert not q.flags.c_contiguous
    out_bhsd = np.full((b, h, sq, d), np.nan, dtype=dt)
    out = out_bhsd.transpose(0, 2, 1, 3)
    got = flashcore.attention(q, k, v, causal=True, out=out)
    assert got is out
    o_ref, _ = ref.attention(q, k, v, causal=True)
    assert ref.rel_err(out_bhsd.transpose(0, 2, 1, 3), o_ref) <= TOL[dtype]


def test_attention_padded_rows(rng):
    """A slice of a bigger buffer (row stride > H*D) reads only the slice."""
    big = randn(rng, (2, 40, 6, 48), np.float32)
    q = big[:, 5:20, 1:5, :32]
    k = big[:, :30, 4:6, :32]
    v = big[:, :30, 2:4, 8:40]
    out = flashcore.attention(q, k, v)
    o_ref, _ = ref.attention(q, k, v)
    assert ref.rel_err(out, o_ref) <= 1e-5


def test_attention_zero_size():
    q = np.zeros((0, 4, 2, 8), np.float32)
    out = flashcore.attention(q, q, q)
    assert out.shape == (0, 4, 2, 8)


@pytest.mark.parametrize("key", [k for k, isa, ok in flashcore.list_kernels() if ok and k.startswith("f32_")])
def test_attention_each_kernel(rng, key):
    check_attention_impl = dict(impl=key)
    q = randn(rng, (1, 19, 2, 32), np.float32)
    k = randn(rng, (1, 23, 2, 32), np.float32)
    out = flashcore.attention(q, k, k, causal=True, **check_attention_impl)
    o_ref, _ = ref.attention(q, k, k, causal=True)
    assert ref.rel_err(out, o_ref) <= 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_threads(rng, threads):
    q = randn(rng, (2, 31, 3, 16), np.float32)
    out = flashcore.attention(q, q, q, threads=threads)
    assert ref.rel_err(out, ref.attention(q, q, q)[0]) <= 1e-5


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mld", [(1, 1, 1), (7, 63, 5), (63, 1000, 64)])
def test_softmax_v(rng, dtype, strategy, mld):
    m, l, d = mld
    dt = np_dtype(dtype)
    s = randn(rng, (m, l), np.float32) * 3
    v = randn(rng, (l, d), dt)
    out = flashcore.softmax_v(s, v, strategy=strategy)
    assert out.shape == (m, d) and out.dtype == dt
    assert ref.rel_err(out, ref.softmax_v(s, v)) <= TOL[dtype]


def test_softmax_v_int32_scaled_colmajor_fast(rng):
    m, l, d = 17, 45, 12
    s_i = rng.integers(-500, 500, size=(m, l), dtype=np.int32)
    v = randn(rng, (l, d), np.float32)
    out = flashcore.softmax_v(s_i, v, scale=0.01)
    assert ref.rel_err(out, ref.softmax_v(s_i, v, 0.01)) <= 1e-5
    s_col = np.asfortranarray(randn(rng, (m, l), np.float32))  # column-major, as seed 000
    out = flashcore.softmax_v(s_col, v, scale=0.5, exp="fast")
    assert ref.rel_err(out, ref.softmax_v(s_col, v, 0.5)) <= FAST_EXP_TOL
    o2 = np.empty((m, d), np.float32)
    assert flashcore.softmax_v(s_col, v, out=o2) is o2


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("sizes", [(1, 1, 1, 1), (7, 63, 5, 9), (100, 33, 257, 64)])
def test_gemm_chain(rng, dtype, sizes):
    m, k1, k2, n = sizes
    dt = np_dtype(dtype)
    a = randn(rng, (m, k1), dt)
    b = randn(rng, (k1, k2), dt)
    c = randn(rng, (k2, n), dt)
    out = flashcore.gemm_chain(a, b, c)
    assert out.shape == (m, n) and out.dtype == dt
    tol = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}[dtype]
    assert ref.rel_err(out, ref.gemm_chain(a, b, c)) <= tol
    o2 = np.empty_like(out)
    assert flashcore.gemm_chain(a, b, c, out=o2) is o2
