"""Context parallelism: ring attention over torch.distributed on flashcore's kernels.

A sequence split over the ranks of a process group (each holding its query shard and its
K/V shard [B, S_local, H(kv), D]) is attended as a whole: the K/V shards travel around the
ring (torch.distributed point-to-point: isend / irecv, posted before the current block's
kernel and waited after it, so the transfer overlaps the computation), each rank attends
its queries to every shard that reaches it with flashcore.attention(return_lse=True), and
the partial results merge in fp32 through flashcore.merge_states. The backward pass
(torch.autograd) runs the ring again: flashcore.attention_backward per block with the
global out and lse (exact partial gradients: P = exp(S - lse) is the global softmax), dq
summed locally, dk / dv travelling with their K/V shard and arriving home after the last
step. GQA sends only the KV heads. Any backend flashcore runs on: gloo with CPU tensors,
NCCL with CUDA tensors.

Layouts (how the global sequence of length S = world * S_local is sharded; `shard` and
`unshard` below do it):
- "contiguous": rank r holds positions [r S_local, (r + 1) S_local);
- "zigzag": the sequence in 2 * world chunks, rank r holds chunks r and 2 world - 1 - r
  (S_local even), so that under a causal mask every rank has the same work.

Causal masks align as in a single call over the whole sequence with Sq = Sk. Not taken:
windows, score variants, varlen (ValueError naming them).
"""
import torch
import torch.distributed as dist

from . import _api

__all__ = ["ring_attention", "shard", "unshard"]


def _layout(layout):
    if layout not in ("contiguous", "zigzag"):
        raise ValueError(f"layout: {layout!r} is neither 'contiguous' nor 'zigzag'")
    return layout


def _chunks(layout, rank, world, s_local):
    """(chunk index along the global sequence, start, length) of a rank's parts, in the
    order they sit in its local tensor."""
    if layout == "contiguous":
        return [(rank, 0, s_local)]
    if s_local % 2 != 0:
        raise ValueError(f"q: zigzag sharding needs an even local length (got {s_local})")
    h = s_local // 2
    return [(rank, 0, h), (2 * world - 1 - rank, h, h)]


def shard(x, rank, world, layout="contiguous", dim=1):
    """Rank `rank`'s shard of a global tensor x (sequence along `dim`) in `layout`."""
    _layout(layout)
    n = x.shape[dim]
    if layout == "contiguous":
        if n % world != 0:
            raise ValueError(f"x: length {n} is not a multiple of the world size {world}")
        s = n // world
        return x.narrow(dim, rank * s, s)
    if n % (2 * world) != 0:
        raise ValueError(f"x: length {n} is not a multiple of 2 x the world size {world}")
    c = n // (2 * world)
    return torch.cat([x.narrow(dim, rank * c, c), x.narrow(dim, (2 * world - 1 - rank) * c, c)], dim=dim)


def unshard(parts, layout="contiguous", dim=1):
    """The global tensor from every rank's shard (parts[r] = rank r's), inverse of shard."""
    _layout(layout)
    world = len(parts)
    if layout == "contiguous":
        return torch.cat(list(parts), dim=dim)
    c = parts[0].shape[dim] // 2
    chunks = [None] * (2 * world)
    for r, p in enumerate(parts):
        chunks[r] = p.narrow(dim, 0, c)
        chunks[2 * world - 1 - r] = p.narrow(dim, c, c)
    return torch.cat(chunks, dim=dim)


def _mode(causal, qc, kc):
    """How a query chunk attends a key chunk: 'full', 'diag' (causal, the chunks equal), or
    None (every key after every query)."""
    if not causal or kc < qc:
        return "full"
    return "diag" if kc == qc else None


class _Ring:
    """The point-to-point exchange of one ring step: send to rank + 1, receive from rank - 1."""

    def __init__(self, group):
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.world) if group is not None \
            else (self.rank + 1) % self.world
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.world) if group is not None \
            else (self.rank - 1) % self.world

    def start(self, tensors, tag):
        """Posts the sends of `tensors` to the next rank and the receives of their likes from
        the previous one (one batch_isend_irecv; `tag` keeps the K/V and gradient messages of
        a step apart); returns (requests, received tensors)."""
        recv = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group, tag) for t in tensors]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group, tag) for t in recv]
        return dist.batch_isend_irecv(ops), recv

    @staticmethod
    def finish(reqs):
        for r in reqs:
            r.wait()


def _forward(q, k, v, causal, layout, scale, threads, group):
    ring = _Ring(group)
    s_local = q.shape[1]
    if k.shape[1] != s_local:
        raise ValueError(f"k: local length {k.shape[1]} differs from q's {s_local} (shards of one sequence)")
    qparts = _chunks(layout, ring.rank, ring.world, s_local)
    acc = [None] * len(qparts)  # per query part: (out fp32, lse)
    kv = (k.contiguous(), v.contiguous())
    for step in range(ring.world):
        src = (ring.rank - step) % ring.world
        reqs, nxt = ring.start(list(kv), 0) if step + 1 < ring.world else ([], None)
        for i, (qc, qs, ql) in enumerate(qparts):
            for kc, ks, kl in _chunks(layout, src, ring.world, s_local):
                mode = _mode(causal, qc, kc)
                if mode is None:
                    continue
                o, lse = _api.attention(q.narrow(1, qs, ql), kv[0].narrow(1, ks, kl), kv[1].narrow(1, ks, kl),
                                        causal=mode == "diag", scale=scale, return_lse=True, threads=threads)
                o = o.float()
                acc[i] = (o, lse) if acc[i] is None else _api.merge_states(acc[i][0], acc[i][1], o, lse,
                                                                           threads=threads)
        _Ring.finish(reqs)
        if nxt is not None:
            kv = tuple(nxt)
    out = torch.cat([a[0] for a in acc], dim=1).to(q.dtype)
    lse = torch.cat([a[1] for a in acc], dim=2)
    return out, lse


def _backward(q, k, v, out, dout, lse, causal, layout, scale, threads, group):
    ring = _Ring(group)
    s_local = q.shape[1]
    qparts = _chunks(layout, ring.rank, ring.world, s_local)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = (k.contiguous(), v.contiguous())
    dkv = (torch.zeros(k.shape, dtype=torch.float32, device=k.device),
           torch.zeros(v.shape, dtype=torch.float32, device=v.device))
    for step in range(ring.world):
        src = (ring.rank - step) % ring.world
        # K and V move on while this step computes; their gradient sums follow after it.
        reqs, nxt = ring.start(list(kv), 0) if step + 1 < ring.world else ([], None)
        for qc, qs, ql in qparts:
            for kc, ks, kl in _chunks(layout, src, ring.world, s_local):
                mode = _mode(causal, qc, kc)
                if mode is None:
                    continue
                g = _api.attention_backward(q.narrow(1, qs, ql), kv[0].narrow(1, ks, kl), kv[1].narrow(1, ks, kl),
                                            out.narrow(1, qs, ql), dout.narrow(1, qs, ql), lse.narrow(2, qs, ql),
                                            causal=mode == "diag", scale=scale, threads=threads)
                dq.narrow(1, qs, ql).add_(g[0].float())
                dkv[0].narrow(1, ks, kl).add_(g[1].float())
                dkv[1].narrow(1, ks, kl).add_(g[2].float())
        # The gradient sums go where this step's K and V go: after the last step, home.
        greqs, gnxt = ring.start(list(dkv), 1) if ring.world > 1 else ([], None)
        _Ring.finish(reqs)
        _Ring.finish(greqs)
        if nxt is not None:
            kv = tuple(nxt)
        if gnxt is not None:
            dkv = tuple(gnxt)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, scale, threads, group):
        out, lse = _forward(q, k, v, causal, layout, scale, threads, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, layout, scale, threads, group)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, dout.contiguous(), lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None


def ring_attention(q, k, v, *, causal=False, layout="contiguous", scale=None, return_lse=False,
                   group=None, threads=None, window=None, cu_seqlens_q=None, cu_seqlens_k=None):
    """Attention of this rank's query shard to the whole sharded sequence of `group`.

    q [B, S_local, H, D], k [B, S_local, Hkv, D], v [B, S_local, Hkv, Dv] (torch tensors, the
    same S_local on every rank, sharded by `layout`: see the module's doc and `shard`).
    Returns this rank's out [B, S_local, H, Dv] (and with return_lse=True its lse [B, H,
    S_local], float32), differentiable in q, k and v. scale defaults to 1/sqrt(D); threads
    passes to flashcore's CPU calls. Every rank of the group must call it with the same
    options.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_attention: torch.distributed is not initialized (init_process_group first)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: ring_attention takes torch tensors")
        if x.dim() != 4:
            raise ValueError(f"{name}: expected [B, S_local, H, D], got rank {x.dim()}")
    if window is not None and tuple(window) != (-1, -1):
        raise ValueError("window: local windows are not taken by ring_attention")
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        raise ValueError("cu_seqlens_q: varlen batches are not taken by ring_attention")
    _layout(layout)
    scale = float(scale) if scale is not None else q.shape[3] ** -0.5
    out, lse = _RingAttention.apply(q, k, v, bool(causal), layout, scale, threads, group)
    return (out, lse) if return_lse else out
