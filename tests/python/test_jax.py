"""JAX arrays through DLPack (CPU): results match the numpy path and the float64 reference,
the output is a JAX array of the input's dtype, bad inputs are refused by name."""
import numpy as np
import pytest

import flashcore

from reference import attention as ref_attention, rel_err

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def on_cpu(x):
    """A JAX array on the CPU (JAX puts new arrays on a GPU when it has one; GPU arrays
    would run the CUDA backend, whose fp32 default is TF32, not this test's subject)."""
    return jax.device_put(x, jax.devices("cpu")[0])


def _inputs(rng, b, sq, sk, h, hkv, d):
    q = rng.standard_normal((b, sq, h, d), dtype=np.float32)
    k = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    v = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
def test_jax_f32_matches_reference(causal):
    rng = np.random.default_rng()
    q, k, v = _inputs(rng, 2, 33, 70, 4, 2, 64)
    out = flashcore.attention(on_cpu(q), on_cpu(k), on_cpu(v), causal=causal)
    assert isinstance(out, jax.Array) and out.dtype == jnp.float32 and out.shape == q.shape
    want, _ = ref_attention(q, k, v, causal=causal)
    assert rel_err(np.asarray(out), want) <= 1e-5


def test_jax_bf16():
    rng = np.random.default_rng()
    q, k, v = _inputs(rng, 1, 17, 40, 2, 1, 32)
    cast = lambda x: on_cpu(x).astype(jnp.bfloat16)
    out = flashcore.attention(cast(q), cast(k), cast(v))
    assert out.dtype == jnp.bfloat16
    want, _ = ref_attention(*(np.asarray(cast(x), dtype=np.float32) for x in (q, k, v)))
    assert rel_err(np.asarray(out, dtype=np.float32), want) <= 1e-2


def test_jax_bad_shape_names_argument():
    rng = np.random.default_rng()
    q, k, v = _inputs(rng, 1, 8, 8, 2, 2, 16)
    with pytest.raises(ValueError, match="k"):
        flashcore.attention(on_cpu(q), on_cpu(k[..., :8]), on_cpu(v))
