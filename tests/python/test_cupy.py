"""CuPy arrays on the GPU through DLPack: results against the float64 reference, output
allocated by CuPy on the input's device, CuPy's current stream used, bad inputs refused
by name. Skipped without CuPy, a GPU, or a flashcore built with CUDA."""
import numpy as np
import pytest

import flashcore
import reference as ref

cp = pytest.importorskip("cupy")


def _gpu_ok():
    try:
        return cp.cuda.runtime.getDeviceCount() > 0 and flashcore.built_with_cuda()
    except Exception:  # no driver / no device
        return False


pytestmark = pytest.mark.skipif(not _gpu_ok(),
                                reason="needs a CUDA GPU and a flashcore built with CUDA")

DT = {"f16": np.float16, "f32": np.float32}
TOL = {"f16": 1e-2, "f32": 2e-3}  # f32 runs on TF32 tensor cores unless exact_fp32


def _inputs(rng, b, sq, sk, h, hkv, d, dtype):
    q, k, v = (rng.standard_normal(s, dtype=np.float32).astype(DT[dtype])
               for s in ((b, sq, h, d), (b, sk, hkv, d), (b, sk, hkv, d)))
    return q, k, v


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 65, 65, 4, 4, 64), (1, 7, 300, 8, 2, 128), (1, 1, 1000, 4, 1, 64)])
def test_cupy_matches_reference(rng, dtype, causal, shape):
    q, k, v = _inputs(rng, *shape, dtype)
    out, lse = flashcore.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=causal,
                                   return_lse=True)
    assert isinstance(out, cp.ndarray) and out.dtype == DT[dtype] and out.shape == q.shape
    assert isinstance(lse, cp.ndarray) and lse.dtype == np.float32
    assert out.device.id == cp.cuda.Device().id
    want, want_lse = ref.attention(q, k, v, causal=causal)
    assert ref.rel_err(cp.asnumpy(out), want) <= TOL[dtype]
    got_lse = cp.asnumpy(lse)
    finite = np.isfinite(want_lse)
    assert np.array_equal(np.isfinite(got_lse), finite)
    assert np.abs(got_lse[finite] - want_lse[finite]).max() <= 2e-2


def test_cupy_out_strided_and_stream(rng):
    """BHSD memory viewed as BSHD, a poisoned out= array, a non-default CuPy stream."""
    bhsd = lambda *s: cp.asarray(rng.standard_normal(s, dtype=np.float32).astype(np.float16))
    q = bhsd(1, 4, 50, 64).transpose(0, 2, 1, 3)
    k = bhsd(1, 2, 37, 64).transpose(0, 2, 1, 3)
    v = bhsd(1, 2, 37, 64).transpose(0, 2, 1, 3)
    out = cp.full((1, 50, 4, 64), cp.nan, dtype=cp.float16)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        got = flashcore.attention(q, k, v, causal=True, out=out)
    stream.synchronize()
    assert got is out
    want, _ = ref.attention(*(np.ascontiguousarray(cp.asnumpy(x)) for x in (q, k, v)), causal=True)
    assert ref.rel_err(cp.asnumpy(out), want) <= TOL["f16"]


def test_cupy_varlen(rng):
    cu_q = cp.asarray(np.array([0, 10, 25, 41], np.int32))
    cu_k = cp.asarray(np.array([0, 20, 20, 53], np.int32))
    q, k, v = _inputs(rng, 1, 41, 53, 4, 2, 64, "f16")
    out = flashcore.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True,
                              cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    want, _ = ref.attention_varlen(q, k, v, cp.asnumpy(cu_q), cp.asnumpy(cu_k), causal=True)
    assert ref.rel_err(cp.asnumpy(out), want) <= TOL["f16"]


def test_cupy_bad_inputs_named(rng):
    q, k, v = _inputs(rng, 1, 8, 8, 2, 2, 64, "f16")
    gq, gk, gv = cp.asarray(q), cp.asarray(k), cp.asarray(v)
    with pytest.raises(ValueError, match="^k"):
        flashcore.attention(gq, gk[..., :32], gv)
    with pytest.raises(TypeError, match="^k:"):
        flashcore.attention(gq, k, gv)                      # numpy among cupy
    out = cp.full(q.shape, 7, dtype=cp.float16)
    with pytest.raises((TypeError, ValueError), match="out"):
        flashcore.attention(gq, gk, gv, out=out.astype(cp.float32))
    assert bool((out == 7).all())                           # untouched
