"""numpy float64 references for the tests: written from the definitions in
include/flashcore/flashcore.hpp, independent of the library's own fp64 reference."""

from __future__ import annotations

import numpy as np


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _probs(q, k, causal, window, scale, softcap=None, alibi_slopes=None, sinks=None):
    """P [B,H,Sq,Sk] (rows with no visible key: 0), lse [B,H,Sq], the scale, dz/ds
    [B,H,Sq,Sk] (the softcap's 1 - tanh^2, else 1) and the sinks' share of each row
    [B,H,Sq] (0 without sinks), in float64. Score variants: s = scale q.k, then
    softcap * tanh(s / softcap), then - slope * |i + Sk - Sq - j|; a sink joins each row's
    sum without a value."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    kk = np.repeat(k, h // hkv, axis=2)  # query head h reads kv head h // group
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    off = sk - sq
    dz = np.ones_like(s)
    if softcap:
        t = np.tanh(s / softcap)
        s, dz = softcap * t, 1.0 - t * t
    if alibi_slopes is not None:
        slopes = f64(alibi_slopes).reshape(-1, h)[:, :, None, None]  # [1 or B, H, 1, 1]
        s = s - slopes * np.abs(i + off - j)
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    mask = np.ones((sq, sk), dtype=bool)
    if right >= 0:
        mask &= j <= i + off + right
    if left >= 0:
        mask &= j >= i + off - left
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if sk > 0 else np.full(s.shape[:-1] + (1,), -np.inf)
    sink = np.full((h,), -np.inf) if sinks is None else f64(sinks)
    m = np.maximum(m, sink[None, :, None, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    psink = np.exp(sink[None, :, None, None] - m_safe)
    l = p.sum(axis=-1, keepdims=True) + psink
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, np.log(np.where(l[..., 0] > 0, l[..., 0], 1.0)) + m_safe[..., 0], -np.inf)
    den = np.where(l > 0, l, 1.0)
    return p / den, lse, scale, dz, (psink / den)[..., 0]


def attention(q, k, v, *, causal=False, window=(-1, -1), scale=None, **variants):
    """O [B,Sq,H,Dv] and lse [B,H,Sq] of softmax(scale Q K^T + mask) V in float64.

    Masks align to the bottom-right corner: query i sees key j iff
    j <= i + (Sk - Sq) + right (right = 0 when causal) and j >= i + (Sk - Sq) - left.
    A fully masked row gives O = 0 and lse = -inf (the sink with sinks). variants: softcap,
    alibi_slopes, sinks (_probs).
    """
    q, k, v = f64(q), f64(k), f64(v)
    p, lse = _probs(q, k, causal, window, scale, **variants)[:2]
    vv = np.repeat(v, q.shape[2] // k.shape[2], axis=2)
    return np.einsum("bhqk,bkhd->bqhd", p, vv), lse


def attention_backward(q, k, v, dout, *, causal=False, window=(-1, -1), scale=None, **variants):
    """(dq, dk, dv) of L = sum(dout * O) in float64, from the definitions: dV = P^T dO,
    dS = P (dO V^T - rowsum(dO O)) (times the softcap's 1 - tanh^2), dQ = scale dS K,
    dK = scale dS^T Q; a KV head's dk, dv sum over its query heads. With sinks also dsinks =
    -sum over rows of P_sink rowsum(dO O)."""
    q, k, v, do = f64(q), f64(k), f64(v), f64(dout)
    b, sq, h, d = q.shape
    sk, hkv, dv_ = k.shape[1], k.shape[2], v.shape[3]
    group = h // hkv
    p, _, scale, dz, psink = _probs(q, k, causal, window, scale, **variants)
    kk, vv = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    o = np.einsum("bhqk,bkhd->bqhd", p, vv)
    D = np.einsum("bqhd,bqhd->bhq", do, o)
    ds = p * (np.einsum("bqhd,bkhd->bhqk", do, vv) - D[..., None]) * dz
    dq = scale * np.einsum("bhqk,bkhd->bqhd", ds, kk)
    dk = scale * np.einsum("bhqk,bqhd->bkhd", ds, q).reshape(b, sk, hkv, group, d).sum(axis=3)
    dv = np.einsum("bhqk,bqhd->bkhd", p, do).reshape(b, sk, hkv, group, dv_).sum(axis=3)
    if variants.get("sinks") is None:
        return dq, dk, dv
    return dq, dk, dv, -(psink * D).sum(axis=(0, 2))


def _sequence_kw(kw, b):
    """The options of varlen sequence b: ALiBi slopes [B, H] give the sequence its row."""
    slopes = kw.get("alibi_slopes")
    if slopes is not None and np.ndim(slopes) == 2:
        kw = dict(kw, alibi_slopes=f64(slopes)[b])
    return kw


def attention_backward_varlen(q, k, v, dout, cu_q, cu_k, **kw):
    """Packed sequences (B = 1); rows outside every sequence get zero gradients."""
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    dsinks = np.zeros(q.shape[2])
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        g = attention_backward(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], dout[:, q0:q1], **_sequence_kw(kw, b))
        dq[:, q0:q1], dk[:, k0:k1], dv[:, k0:k1] = g[:3]
        if len(g) > 3:
            dsinks += g[3]
    return (dq, dk, dv) if kw.get("sinks") is None else (dq, dk, dv, dsinks)


def attention_varlen(q, k, v, cu_q, cu_k, **kw):
    """Packed sequences (B = 1): each segment attends only within itself."""
    h, dv = q.shape[2], v.shape[3]
    total_q = int(cu_q[-1])
    o = np.zeros((1, total_q, h, dv))
    lse = np.full((1, h, total_q), -np.inf)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 == q0:
            continue
        ob, lb = attention(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], **_sequence_kw(kw, b))
        o[:, q0:q1] = ob
        lse[:, :, q0:q1] = lb
    return o, lse


def softmax_v(s, v, scale=1.0):
    s = f64(s) * scale
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m)
    return (p / p.sum(axis=1, keepdims=True)) @ f64(v)


def gemm_chain(a, b, c):
    return (f64(a) @ f64(b)) @ f64(c)


def rel_err(got, ref) -> float:
    got = f64(got)
    ref = f64(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert not np.isnan(got).any(), "NaN in output"
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (den if den > 0 else 1.0))
