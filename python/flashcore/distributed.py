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


def _blocks(causal, layout, rank, src, world, s_local):
    """The (query chunk, key chunk) pairs of a step where rank `rank` holds the K/V shard of
    rank `src`, as (query part index, q start, q length, k start, k length, diag): under a
    causal mask a key chunk before the query chunk is attended in full, the same chunk with
    the mask (diag), a later one not at all."""
    for i, (qc, qs, ql) in enumerate(_chunks(layout, rank, world, s_local)):
        for kc, ks, kl in _chunks(layout, src, world, s_local):
            if not causal or kc <= qc:
                yield i, qs, ql, ks, kl, causal and kc == qc


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


def _forward(q, k, v, sinks, causal, layout, scale, softcap, threads, group):
    ring = _Ring(group)
    s_local = q.shape[1]
    if k.shape[1] != s_local:
        raise ValueError(f"k: local length {k.shape[1]} differs from q's {s_local} (shards of one sequence)")
    acc = [None] * len(_chunks(layout, ring.rank, ring.world, s_local))  # per query part: (out fp32, lse)
    kv = (k.contiguous(), v.contiguous())
    for step in range(ring.world):
        src = (ring.rank - step) % ring.world
        reqs, nxt = ring.start(list(kv), 0) if step + 1 < ring.world else ([], None)
        for i, qs, ql, ks, kl, diag in _blocks(causal, layout, ring.rank, src, ring.world, s_local):
            o, lse = _api.attention(q.narrow(1, qs, ql), kv[0].narrow(1, ks, kl), kv[1].narrow(1, ks, kl),
                                    causal=diag, scale=scale, softcap=softcap, return_lse=True, threads=threads)
            o = o.float()
            acc[i] = (o, lse) if acc[i] is None else _api.merge_states(acc[i][0], acc[i][1], o, lse, threads=threads)
        _Ring.finish(reqs)
        if nxt is not None:
            kv = tuple(nxt)
    out = torch.cat([a[0] for a in acc], dim=1)
    lse = torch.cat([a[1] for a in acc], dim=2)
    if sinks is not None:  # each row's sink joins once: a state with out 0 and lse = the sink
        sink_lse = sinks.detach().float().to(lse.device)[None, :, None].expand_as(lse).contiguous()
        out, lse = _api.merge_states(out, lse, torch.zeros_like(out), sink_lse, threads=threads)
    return out.to(q.dtype), lse


def _sink_grad(sinks, out, dout, lse):
    """This rank's share of d(loss)/d(sinks): -sum over its rows of P_sink D, P_sink =
    exp(sink - lse) (lse with the sink), D = rowsum(dout * out)."""
    d = (dout.float() * out.float()).sum(-1).transpose(1, 2)  # [B, H, S_local]
    s = sinks.detach().float().to(lse.device)[None, :, None]
    p = torch.where(torch.isneginf(s), torch.zeros_like(lse), torch.exp(s - lse))
    return -(p * d).sum(dim=(0, 2)).to(sinks.dtype)


def _backward(q, k, v, out, dout, lse, causal, layout, scale, softcap, threads, group):
    ring = _Ring(group)
    s_local = q.shape[1]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = (k.contiguous(), v.contiguous())
    dkv = (torch.zeros(k.shape, dtype=torch.float32, device=k.device),
           torch.zeros(v.shape, dtype=torch.float32, device=v.device))
    for step in range(ring.world):
        src = (ring.rank - step) % ring.world
        # K and V move on while this step computes; their gradient sums follow after it.
        reqs, nxt = ring.start(list(kv), 0) if step + 1 < ring.world else ([], None)
        for _, qs, ql, ks, kl, diag in _blocks(causal, layout, ring.rank, src, ring.world, s_local):
            g = _api.attention_backward(q.narrow(1, qs, ql), kv[0].narrow(1, ks, kl), kv[1].narrow(1, ks, kl),
                                        out.narrow(1, qs, ql), dout.narrow(1, qs, ql), lse.narrow(2, qs, ql),
                                        causal=diag, scale=scale, softcap=softcap, threads=threads)
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
    def forward(ctx, q, k, v, sinks, causal, layout, scale, softcap, threads, group):
        out, lse = _forward(q, k, v, sinks, causal, layout, scale, softcap, threads, group)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.args = (causal, layout, scale, softcap, threads, group)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        # (the sink's share is in lse: the key blocks' backward needs nothing more)
        dq, dk, dv = _backward(q, k, v, out, dout.contiguous(), lse, *ctx.args)
        dsinks = _sink_grad(sinks, out, dout, lse) if sinks is not None and ctx.needs_input_grad[3] else None
        return dq, dk, dv, dsinks, None, None, None, None, None, None


def ring_attention(q, k, v, *, causal=False, layout="contiguous", scale=None, return_lse=False,
                   group=None, threads=None, softcap=None, sinks=None, window=None, cu_seqlens_q=None,
                   cu_seqlens_k=None, alibi_slopes=None):
    """Attention of this rank's query shard to the whole sharded sequence of `group`.

    q [B, S_local, H, D], k [B, S_local, Hkv, D], v [B, S_local, Hkv, Dv] (torch tensors, the
    same S_local on every rank, sharded by `layout`: see the module's doc and `shard`).
    Returns this rank's out [B, S_local, H, Dv] (and with return_lse=True its lse [B, H,
    S_local], float32), differentiable in q, k and v. scale defaults to 1/sqrt(D); threads
    passes to flashcore's CPU calls. Every rank of the group must call it with the same
    options. softcap as flashcore.attention's (on every key block); sinks ([H] float32, the
    same on every rank) join each row once, after the blocks' merge, and are differentiable:
    each rank's sinks.grad is its own rows' share (sum it over the group as for any
    replicated parameter). Windows, ALiBi and varlen batches are refused (their masks and
    biases are positional, which the blocks' local calls cannot express).
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
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: ALiBi is not taken by ring_attention")
    if sinks is not None and (not isinstance(sinks, torch.Tensor) or sinks.dim() != 1 or sinks.shape[0] != q.shape[2]):
        raise ValueError(f"sinks: expected a torch tensor [H] with H = {q.shape[2]}")
    _layout(layout)
    scale = float(scale) if scale is not None else q.shape[3] ** -0.5
    softcap = float(softcap) if softcap else None
    out, lse = _RingAttention.apply(q, k, v, sinks, bool(causal), layout, scale, softcap, threads, group)
    return (out, lse) if return_lse else out
