"""flashcore attention as a JAX function that jit, grad and vmap take.

    import flashcore.jax as fcj
    out = fcj.attention(q, k, v, causal=True)            # q [B, Sq, H, D], k/v [B, Sk, Hkv, D]
    dq, dk, dv = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

The forward and the backward run flashcore's CPU kernels (`flashcore.attention` with its
lse, then `flashcore.attention_backward` on the saved out and lse) through
`jax.pure_callback`, wrapped in `jax.custom_vjp`: under `jax.jit` the call is one host
callback per pass, and arrays on an accelerator go through the host. Options are static
(Python values, hashable): causal, window, scale, softcap, deterministic, threads. float32,
float16 and bfloat16 arrays; the output has q's dtype, the gradients those of q, k and v.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import _api

__all__ = ["attention"]


def _options(causal, window, scale, softcap, threads):
    return dict(causal=causal, window=window, scale=scale, softcap=softcap, threads=threads)


def _host(x):
    """A callback argument as a numpy array flashcore reads in place (C order)."""
    return np.ascontiguousarray(np.asarray(x))


def _forward_host(opts, q, k, v):
    out, lse = _api.attention(_host(q), _host(k), _host(v), return_lse=True, **opts)
    return np.asarray(out), np.asarray(lse)


def _backward_host(opts, deterministic, q, k, v, out, lse, dout):
    dq, dk, dv = _api.attention_backward(_host(q), _host(k), _host(v), _host(out), _host(dout), _host(lse),
                                         deterministic=deterministic, **opts)
    return np.asarray(dq), np.asarray(dk), np.asarray(dv)


def _check(q, k, v):
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        if x.ndim != 4:
            raise ValueError(f"{name}: expected a rank-4 array [B, S, H, D], got shape {tuple(x.shape)}")
        if x.dtype not in (jnp.float32, jnp.float16, jnp.bfloat16):
            raise TypeError(f"{name}: dtype {x.dtype} is not float32, float16 or bfloat16")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"k, v: dtypes {k.dtype}, {v.dtype} differ from q's {q.dtype}")


def _forward(opts, q, k, v):
    b, sq, h, _ = q.shape
    shapes = (jax.ShapeDtypeStruct((b, sq, h, v.shape[3]), q.dtype), jax.ShapeDtypeStruct((b, h, sq), jnp.float32))
    return jax.pure_callback(functools.partial(_forward_host, opts), shapes, q, k, v, vmap_method="sequential")


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _attention(q, k, v, opts_key, deterministic):
    return _forward(dict(opts_key), q, k, v)[0]


def _attention_fwd(q, k, v, opts_key, deterministic):
    out, lse = _forward(dict(opts_key), q, k, v)
    return out, (q, k, v, out, lse)


def _attention_bwd(opts_key, deterministic, res, dout):
    q, k, v, out, lse = res
    shapes = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v))
    return jax.pure_callback(functools.partial(_backward_host, dict(opts_key), deterministic), shapes, q, k, v, out,
                             lse, dout.astype(out.dtype), vmap_method="sequential")


_attention.defvjp(_attention_fwd, _attention_bwd)


def attention(q, k, v, *, causal=False, window=(-1, -1), scale=None, softcap=None, deterministic=False,
              threads=None):
    """softmax(scale * Q K^T + mask) V on JAX arrays, differentiable in q, k and v.

    q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (H % Hkv == 0); returns out
    [B, Sq, H, Dv] in q's dtype. causal (bottom-right when Sq != Sk), window = (left, right),
    scale (None: 1 / sqrt(D)) and softcap as `flashcore.attention`; deterministic as
    `flashcore.attention_backward` (bit-identical gradients across runs and thread counts);
    threads: CPU threads (None: all cores). Every option is static: a new value traces the
    function again under jit.
    """
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    _check(q, k, v)
    window = tuple(int(w) for w in window)
    opts = _options(bool(causal), window, None if scale is None else float(scale),
                    None if softcap is None else float(softcap), threads)
    return _attention(q, k, v, tuple(sorted(opts.items())), bool(deterministic))
