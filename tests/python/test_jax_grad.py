"""flashcore.jax.attention: jax.grad, jax.jit and jax.vmap through the custom_vjp (CPU
kernels), against an independent attention written in jax.numpy (float32), on fresh random
inputs: causal with Sq != Sk, GQA, windows, softcap, bf16, deterministic gradients, bad
arguments refused by name."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
fcj = pytest.importorskip("flashcore.jax")

CPU = jax.devices("cpu")[0]


def ref_attention(q, k, v, causal=False, window=(-1, -1), scale=None, softcap=None):
    """Attention in jax.numpy: GQA by repeating the KV heads, masks bottom-right aligned,
    fully masked rows 0."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = h // hkv
    kk, vv = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, kk, precision="highest") * (1.0 / np.sqrt(d) if scale is None else scale)
    if softcap:
        s = softcap * jnp.tanh(s / softcap)
    i = jnp.arange(sq)[:, None] + (sk - sq)
    j = jnp.arange(sk)[None, :]
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    ok = jnp.ones((sq, sk), bool)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    s = jnp.where(ok, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.where(ok, jnp.exp(s - m), 0.0)
    l = jnp.sum(e, axis=-1, keepdims=True)
    p = e / jnp.where(l > 0, l, 1.0)
    return jnp.einsum("bhqk,bkhd->bqhd", p, vv, precision="highest")


def inputs(rng, b, sq, sk, h, hkv, d, dtype=np.float32):
    mk = lambda *s: jax.device_put(jnp.asarray(rng.standard_normal(s, dtype=np.float32)).astype(dtype), CPU)
    return mk(b, sq, h, d), mk(b, sk, hkv, d), mk(b, sk, hkv, d), mk(b, sq, h, d)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)


CASES = [
    dict(b=2, sq=33, sk=70, h=4, hkv=2, d=64, causal=True),
    dict(b=1, sq=17, sk=17, h=8, hkv=1, d=32, causal=False),
    dict(b=2, sq=40, sk=25, h=2, hkv=2, d=64, causal=True),  # Sq > Sk: fully masked rows
    dict(b=1, sq=50, sk=90, h=4, hkv=4, d=32, window=(20, 3)),
    dict(b=1, sq=31, sk=31, h=2, hkv=1, d=64, causal=True, softcap=2.0, scale=0.4),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_grad_matches_jnp_reference(case):
    rng = np.random.default_rng()
    c = dict(case)
    q, k, v, w = inputs(rng, c.pop("b"), c.pop("sq"), c.pop("sk"), c.pop("h"), c.pop("hkv"), c.pop("d"))
    loss = lambda f: (lambda q, k, v: jnp.sum(f(q, k, v, **c) * w))
    out = fcj.attention(q, k, v, **c)
    assert out.dtype == jnp.float32 and out.shape == q.shape
    assert rel(out, ref_attention(q, k, v, **c)) <= 1e-5
    got = jax.grad(loss(fcj.attention), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss(ref_attention), argnums=(0, 1, 2))(q, k, v)
    for g, r, name in zip(got, want, ("dq", "dk", "dv")):
        assert g.shape == r.shape and g.dtype == r.dtype, name
        assert rel(g, r) <= 1e-4, name


def test_jit_grad_and_vmap():
    rng = np.random.default_rng()
    q, k, v, w = inputs(rng, 2, 24, 40, 4, 2, 32)
    f = lambda q, k, v: jnp.sum(fcj.attention(q, k, v, causal=True) * w)
    g = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)
    r = jax.grad(lambda q, k, v: jnp.sum(ref_attention(q, k, v, causal=True) * w), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g, r):
        assert rel(a, b) <= 1e-4
    assert rel(jax.jit(lambda q, k, v: fcj.attention(q, k, v, causal=True))(q, k, v),
               ref_attention(q, k, v, causal=True)) <= 1e-5
    # vmap over a leading axis of three problems (one callback per problem)
    qs, ks, vs = (jnp.stack([x, x * 0.5, -x]) for x in (q, k, v))
    outs = jax.vmap(lambda q, k, v: fcj.attention(q, k, v))(qs, ks, vs)
    for i in range(3):
        assert rel(outs[i], ref_attention(qs[i], ks[i], vs[i])) <= 1e-5


@pytest.mark.parametrize("dt", [jnp.bfloat16, jnp.float16])
def test_16bit_grads(dt):
    rng = np.random.default_rng()
    q, k, v, w = inputs(rng, 1, 20, 45, 4, 2, 64, dt)
    got = jax.grad(lambda q, k, v: jnp.sum(fcj.attention(q, k, v, causal=True).astype(jnp.float32) * w),
                   argnums=(0, 1, 2))(q, k, v)
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    want = jax.grad(lambda q, k, v: jnp.sum(ref_attention(q, k, v, causal=True) * w.astype(jnp.float32)),
                    argnums=(0, 1, 2))(*f32)
    for g, r, name in zip(got, want, ("dq", "dk", "dv")):
        assert g.dtype == dt, name
        assert rel(g.astype(jnp.float32), r) <= 3e-2, name


def test_deterministic_gradients_bitwise():
    rng = np.random.default_rng()
    q, k, v, w = inputs(rng, 1, 64, 300, 4, 1, 64)
    f = lambda q, k, v, t: jnp.sum(fcj.attention(q, k, v, causal=True, deterministic=True, threads=t) * w)
    a = jax.grad(f, argnums=(0, 1, 2))(q, k, v, 1)
    b = jax.grad(f, argnums=(0, 1, 2))(q, k, v, 2)
    for x, y in zip(a, b):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_bad_arguments_named():
    rng = np.random.default_rng()
    q, k, v, _ = inputs(rng, 1, 8, 8, 2, 2, 32)
    with pytest.raises(ValueError, match="q: expected a rank-4"):
        fcj.attention(q[0], k, v)
    with pytest.raises(TypeError, match="k: dtype int32"):
        fcj.attention(q, k.astype(jnp.int32), v)
    with pytest.raises(TypeError, match="k, v: dtypes"):
        fcj.attention(q, k.astype(jnp.bfloat16), v)
    with pytest.raises(Exception, match="H % Hkv|heads"):  # flashcore's own check, named
        fcj.attention(q[:, :, :1].repeat(3, axis=2), k, v)
