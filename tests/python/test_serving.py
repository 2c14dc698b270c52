"""merge_states from Python (numpy; jax when present) against the float64 reference in
reference.py."""

import numpy as np
import pytest

import flashcore
import reference as ref
from conftest import TOL, np_dtype, randn


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_merge_states_of_split_attention(rng, dtype):
    dt = np_dtype(dtype)
    q = randn(rng, (2, 5, 4, 32), dt)
    k = randn(rng, (2, 100, 2, 32), dt)
    v = randn(rng, (2, 100, 2, 32), dt)
    cuts = sorted(int(c) for c in rng.integers(0, 101, 2))
    parts = [flashcore.attention(q, k[:, a:b], v[:, a:b], return_lse=True)
             for a, b in zip([0] + cuts, cuts + [100])]
    o_ref, lse_ref = ref.attention(q, k, v)
    out, lse = flashcore.merge_states(*parts[0], *parts[1])
    out, lse = flashcore.merge_states(out, lse, *parts[2])
    assert out.dtype == dt and lse.dtype == np.float32
    assert ref.rel_err(out, o_ref) <= TOL[dtype]
    on, ln = flashcore.merge_states_n(np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]))
    assert ref.rel_err(on, o_ref) <= TOL[dtype]
    assert np.allclose(ln, lse_ref, atol=1e-3, rtol=1e-3)
    # in place into the first part
    oa, la = parts[0]
    flashcore.merge_states_n([p[0] for p in parts], [p[1] for p in parts], out=oa, lse=la)
    assert np.array_equal(oa, on) and np.array_equal(la, ln)


def test_merge_states_hostile_and_errors(rng):
    oa = randn(rng, (1, 3, 2, 8), np.float32)
    ob = randn(rng, (1, 3, 2, 8), np.float32)
    la = np.array([[[-np.inf, 0.5, np.nan], [1.0, 2.0, 3.0]]], np.float32)
    lb = np.array([[[-np.inf, -np.inf, 0.0], [1.0, 2.0, 3.0]]], np.float32)
    oa[0, 0, 0] = np.nan  # a -inf part's out is not read
    ob[0, :2, 0] = np.nan
    out, lse = flashcore.merge_states(oa, la, ob, lb)
    assert (out[0, 0, 0] == 0).all() and lse[0, 0, 0] == -np.inf
    assert np.array_equal(out[0, 1, 0], oa[0, 1, 0]) and lse[0, 0, 1] == np.float32(0.5)
    assert np.isnan(out[0, 2, 0]).all() and np.isnan(lse[0, 0, 2])
    assert np.allclose(out[0, :, 1], (oa[0, :, 1] + ob[0, :, 1]) / 2, atol=1e-6)
    with pytest.raises(ValueError, match="out_b: dim 2"):
        flashcore.merge_states(oa, la, ob[:, :, :1], lb)
    with pytest.raises(ValueError, match="lse_parts: has 1 parts"):
        flashcore.merge_states_n([oa, ob], [la])
    buf = np.zeros(oa.size + 1, np.float32)
    a_view, shifted = buf[:-1].reshape(oa.shape), buf[1:].reshape(oa.shape)
    with pytest.raises(ValueError, match="out: overlaps out_a"):
        flashcore.merge_states(a_view, la, ob, lb, out=shifted)
    with pytest.raises(TypeError, match="out_parts"):
        flashcore.merge_states_n(oa, [la])


def test_jax_merge(rng):
    jnp = pytest.importorskip("jax.numpy")
    oa, ob = (randn(rng, (1, 4, 2, 8), np.float32) for _ in range(2))
    la, lb = (randn(rng, (1, 2, 4), np.float32) for _ in range(2))
    out, lse = flashcore.merge_states(jnp.asarray(oa), jnp.asarray(la), jnp.asarray(ob), jnp.asarray(lb))
    want, wlse = flashcore.merge_states(oa, la, ob, lb)
    assert np.allclose(np.asarray(out), want) and np.allclose(np.asarray(lse), wlse)
