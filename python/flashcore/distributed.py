"""Context parallelism: ring attention over torch.distributed on flashcore's kernels.

A sequence split over the ranks of a process group (each holding its query shard and its
K/V shard [B, S_local, H(kv), D]) is attended as a whole: the K/V shards travel around the
ring (torch.distributed point-to-point: isend / irecv, posted before the current block's
kernel and waited after it, so the transfer overlaps the computation), each rank attends
its queries to every shard that reaches it with one flashcore.attention(return_lse=True)
call per step (_blocks), and the partial results merge in fp32 through
flashcore.merge_states. The backward pass (torch.autograd) runs the ring again:
flashcore.attention_backward per step with the global out and lse (exact partial
gradients: P = exp(S - lse) is the global softmax), dq summed locally, dk / dv sums
travelling with their K/V shard one step behind it (each transfer overlapping the next
step's call) and arriving home after the last step. GQA sends only the KV heads. Any
backend flashcore runs on: gloo with CPU tensors, NCCL with CUDA tensors.

Layouts (how the global sequence of length S = world * S_local is sharded; `shard` and
`unshard` below do it):
- "contiguous": rank r holds positions [r S_local, (r + 1) S_local);
- "zigzag": the sequence in 2 * world chunks, rank r holds chunks r and 2 world - 1 - r
  (S_local even), so that under a causal mask every rank has the same work.

Causal masks align as in a single call over the whole sequence with Sq = Sk. Varlen
batches (cu_seqlens: the global sequences' prefix sums): every sequence is sharded by the
layout on its own (its length a multiple of the world size, of twice it for zigzag) and the
local tensors hold the sequences' shards packed in order; each step's call then takes the
prefix sums of what it reads (a part's, or the whole shard's). Not taken: windows, ALiBi
(ValueError naming them).
"""
import torch
import torch.distributed as dist

from . import _api

__all__ = ["ring_attention", "shard", "unshard"]


def _layout(layout):
    if layout not in ("contiguous", "zigzag"):
        raise ValueError(f"layout: {layout!r} is neither 'contiguous' nor 'zigzag'")
    return layout


def _shard_one(x, rank, world, layout, dim):
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


def _unshard_one(parts, layout, dim):
    world = len(parts)
    if layout == "contiguous":
        return torch.cat(list(parts), dim=dim)
    c = parts[0].shape[dim] // 2
    chunks = [None] * (2 * world)
    for r, p in enumerate(parts):
        chunks[r] = p.narrow(dim, 0, c)
        chunks[2 * world - 1 - r] = p.narrow(dim, c, c)
    return torch.cat(chunks, dim=dim)


def _lengths(cu_seqlens):
    """The sequence lengths of a prefix-sum list or tensor (checked)."""
    cu = [int(c) for c in (cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else cu_seqlens)]
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError("cu_seqlens: expected prefix sums 0 = c0 <= c1 <= ... (length batch + 1)")
    return [b - a for a, b in zip(cu, cu[1:])]


def shard(x, rank, world, layout="contiguous", dim=1, cu_seqlens=None):
    """Rank `rank`'s shard of a global tensor x (sequence along `dim`) in `layout`. With
    cu_seqlens (the packed sequences' prefix sums along `dim`), each sequence is sharded on
    its own and the shards are packed in order."""
    _layout(layout)
    if cu_seqlens is None:
        return _shard_one(x, rank, world, layout, dim)
    lens, start, out = _lengths(cu_seqlens), 0, []
    if sum(lens) > x.shape[dim]:
        raise ValueError(f"cu_seqlens: the sequences end at {sum(lens)}, past x's length {x.shape[dim]}")
    for n in lens:
        out.append(_shard_one(x.narrow(dim, start, n), rank, world, layout, dim))
        start += n
    return torch.cat(out, dim=dim)


def unshard(parts, layout="contiguous", dim=1, cu_seqlens=None):
    """The global tensor from every rank's shard (parts[r] = rank r's), inverse of shard
    (with the same cu_seqlens for varlen)."""
    _layout(layout)
    if cu_seqlens is None:
        return _unshard_one(parts, layout, dim)
    world, starts, out = len(parts), 0, []
    for n in _lengths(cu_seqlens):
        m = n // world
        out.append(_unshard_one([p.narrow(dim, starts, m) for p in parts], layout, dim))
        starts += m
    return torch.cat(out, dim=dim)


def _blocks(causal, layout, rank, src, world):
    """The one call of a step where rank `rank` holds the K/V shard of rank `src`, as
    (query part, key part, causal): a part index, or None for the whole shard. Without a
    mask every step attends the whole shard to the whole shard. With one, the own shard
    is one causal call: in zigzag the local order of chunks r and 2 world - 1 - r keeps
    the global order, so the local causal mask is the global one (chunk r's keys all
    precede chunk 2 world - 1 - r's queries). A shard from an earlier rank (src < rank)
    is attended in full: contiguous, all of it by all of ours; zigzag, its first chunk
    (src < rank) by both of ours, its second (2 world - 1 - src > 2 world - 1 - rank) by
    none. From a later rank: contiguous, nothing; zigzag, both of its chunks precede our
    second chunk and follow our first, so our second part attends the whole shard."""
    if not causal:
        return [(None, None, False)]
    if src == rank:
        return [(None, None, True)]
    if src < rank:
        return [(None, None if layout == "contiguous" else 0, False)]
    return [] if layout == "contiguous" else [(1, None, False)]


class _Parts:
    """Where a shard's parts sit along its sequence dim (the same for every rank's shard):
    one part (contiguous) or two halves (zigzag); varlen: each sequence's share of the
    part, gathered by index, with the part's own prefix sums for the calls (and the whole
    shard's, for calls on all of it)."""

    def __init__(self, layout, s_local, lens, world, device):
        n = 1 if layout == "contiguous" else 2
        self.varlen = lens is not None
        if not self.varlen:
            if s_local % n != 0:
                raise ValueError(f"q: zigzag sharding needs an even local length (got {s_local})")
            self.h = s_local // n
            return
        unit = world * n
        if any(m % unit for m in lens):
            raise ValueError(f"cu_seqlens_q: every sequence length must be a multiple of {unit} "
                             f"({layout} over {world} ranks), got {lens}")
        local = [m // world for m in lens]
        if sum(local) != s_local:
            raise ValueError(f"q: local length {s_local} is not the sequences' shards' {sum(local)}")
        starts = [sum(local[:b]) for b in range(len(local))]
        h = [m // n for m in local]  # each sequence's rows in one part
        self.idx, self.cu = [], []
        for part in range(n):
            self.idx.append(torch.cat([torch.arange(st + part * hb, st + (part + 1) * hb) for st, hb in
                                       zip(starts, h)]).to(device))
            self.cu.append(torch.tensor([sum(h[:b]) for b in range(len(h) + 1)], dtype=torch.int32, device=device))
        self.cu_all = torch.tensor([sum(local[:b]) for b in range(len(local) + 1)], dtype=torch.int32,
                                   device=device)

    def get(self, x, part, dim=1):
        """Part `part` of a shard's tensor (None: all of it); a view unless varlen."""
        if part is None:
            return x
        if self.varlen:
            return x.index_select(dim, self.idx[part])
        return x.narrow(dim, part * self.h, self.h)

    def put(self, acc, part, x, dim=1):
        """Writes x back as part `part` of acc where get() returned a copy (varlen)."""
        if part is not None and self.varlen:
            acc.index_copy_(dim, self.idx[part], x)

    def add(self, acc, part, x, dim=1):
        """acc's part `part` (None: all of it) += x (x in any float dtype)."""
        if part is None:
            acc.add_(x)
        elif self.varlen:
            acc.index_add_(dim, self.idx[part], x.to(acc.dtype))
        else:
            acc.narrow(dim, part * self.h, self.h).add_(x)

    def kwargs(self, qi, kj):
        if not self.varlen:
            return {}
        return dict(cu_seqlens_q=self.cu_all if qi is None else self.cu[qi],
                    cu_seqlens_k=self.cu_all if kj is None else self.cu[kj])


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


# exchange=False (the ring bench's compute-only time, python/flashcore/ring_bench.py): no
# transfer, every step attends to the rank's own K/V shard again: the same calls and merges
# without the communication; its result is not the attention.
def _forward(q, k, v, sinks, causal, layout, scale, softcap, threads, group, lens, exchange=True):
    ring = _Ring(group)
    s_local = q.shape[1]
    if k.shape[1] != s_local:
        raise ValueError(f"k: local length {k.shape[1]} differs from q's {s_local} (shards of one sequence)")
    parts = _Parts(layout, s_local, lens, ring.world, q.device)
    out = lse = None  # the merged state of the whole shard: out fp32, lse
    kv = (k.contiguous(), v.contiguous())
    for step in range(ring.world):
        src = (ring.rank - step) % ring.world
        reqs, nxt = ring.start(list(kv), 0) if exchange and step + 1 < ring.world else ([], None)
        for i, j, mask in _blocks(causal, layout, ring.rank, src, ring.world):
            o, l = _api.attention(parts.get(q, i), parts.get(kv[0], j), parts.get(kv[1], j), causal=mask,
                                  scale=scale, softcap=softcap, return_lse=True, threads=threads,
                                  **parts.kwargs(i, j))
            if out is None:  # step 0 covers the whole shard
                out, lse = o.float(), l
                continue
            # merged in place: into acc's own memory, or a varlen part's copy written back
            oa, la = parts.get(out, i), parts.get(lse, i, dim=2)
            _api.merge_states(oa, la, o.float(), l, out=oa, lse=la, threads=threads)
            parts.put(out, i, oa)
            parts.put(lse, i, la, dim=2)
        _Ring.finish(reqs)
        if nxt is not None:
            kv = tuple(nxt)
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


def _backward(q, k, v, out, dout, lse, causal, layout, scale, softcap, threads, group, lens, exchange=True):
    ring = _Ring(group)
    parts = _Parts(layout, q.shape[1], lens, ring.world, q.device)
    dq = None  # fp32; step 0's call covers the whole shard
    kv = (k.contiguous(), v.contiguous())
    sums = None  # (requests, received dk / dv sums) of the K/V shard held next
    for step in range(ring.world):
        src = (ring.rank - step) % ring.world
        # K and V move on while this step computes.
        reqs, nxt = ring.start(list(kv), 0) if exchange and step + 1 < ring.world else ([], None)
        dkv = None
        for i, j, mask in _blocks(causal, layout, ring.rank, src, ring.world):  # at most one
            g = _api.attention_backward(parts.get(q, i), parts.get(kv[0], j), parts.get(kv[1], j), parts.get(out, i),
                                        parts.get(dout, i), parts.get(lse, i, dim=2), causal=mask,
                                        scale=scale, softcap=softcap, threads=threads, **parts.kwargs(i, j))
            if dq is None:
                dq = g[0].float()
            else:
                parts.add(dq, i, g[0])
            if j is None:  # the whole shard's keys: the step's gradients are the sums
                dkv = (g[1].float(), g[2].float())
            else:
                dkv = tuple(torch.zeros(x.shape, dtype=torch.float32, device=q.device) for x in kv)
                parts.add(dkv[0], j, g[1])
                parts.add(dkv[1], j, g[2])
        if dkv is None:  # a step whose keys the mask hides from all of the rank's queries
            dkv = tuple(torch.zeros(x.shape, dtype=torch.float32, device=q.device) for x in kv)
        # The gradient sums of this K/V shard from the ranks that held it before (sent during
        # this step's computation) join ours, and go on to the rank that holds it next,
        # overlapping the next step; after the last step they are complete and go home in
        # k's and v's dtype (the rounding they get at home anyway: half the bytes in 16 bits).
        if sums is not None:
            _Ring.finish(sums[0])
            dkv[0].add_(sums[1][0])
            dkv[1].add_(sums[1][1])
        if step + 1 == ring.world:
            dkv = (dkv[0].to(k.dtype), dkv[1].to(v.dtype))
        sums = ring.start(list(dkv), 1) if exchange and ring.world > 1 else None
        _Ring.finish(reqs)
        if nxt is not None:
            kv = tuple(nxt)
    if sums is not None:
        _Ring.finish(sums[0])
        dkv = sums[1]
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, causal, layout, scale, softcap, threads, group, lens):
        out, lse = _forward(q, k, v, sinks, causal, layout, scale, softcap, threads, group, lens)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.args = (causal, layout, scale, softcap, threads, group, lens)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        # (the sink's share is in lse: the key blocks' backward needs nothing more)
        dq, dk, dv = _backward(q, k, v, out, dout.contiguous(), lse, *ctx.args)
        dsinks = _sink_grad(sinks, out, dout, lse) if sinks is not None and ctx.needs_input_grad[3] else None
        return dq, dk, dv, dsinks, None, None, None, None, None, None, None


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
    replicated parameter). Varlen: B = 1, cu_seqlens_q (= cu_seqlens_k, or None) the global
    sequences' prefix sums (a list or int tensor, the same on every rank), each length a
    multiple of the world size (twice it for zigzag); q, k, v hold the sequences' shards
    packed in order (`shard(x, rank, world, layout, cu_seqlens=...)`). Windows and ALiBi are
    refused (their masks and biases are positional, which the blocks' local calls cannot
    express).
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
    lens = None
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if cu_seqlens_q is None or (cu_seqlens_k is not None and _lengths(cu_seqlens_k) != _lengths(cu_seqlens_q)):
            raise ValueError("cu_seqlens_k: ring_attention takes one sequence set (cu_seqlens_k = cu_seqlens_q)")
        lens = _lengths(cu_seqlens_q)
        if q.shape[0] != 1:
            raise ValueError(f"q: varlen takes B = 1 (the sequences packed along dim 1), got B = {q.shape[0]}")
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: ALiBi is not taken by ring_attention")
    if sinks is not None and (not isinstance(sinks, torch.Tensor) or sinks.dim() != 1 or sinks.shape[0] != q.shape[2]):
        raise ValueError(f"sinks: expected a torch tensor [H] with H = {q.shape[2]}")
    _layout(layout)
    scale = float(scale) if scale is not None else q.shape[3] ** -0.5
    softcap = float(softcap) if softcap else None
    out, lse = _RingAttention.apply(q, k, v, sinks, bool(causal), layout, scale, softcap, threads, group, lens)
    return (out, lse) if return_lse else out
