"""python -m flashcore.bench --op ring-attention: flashcore.distributed.ring_attention timed
over `--world` processes on this machine (gloo with CPU tensors, or NCCL with one GPU per
rank for --backend cuda), against our own single call over the whole sequence on one
device (rank 0's, timed first, the other ranks waiting).

Per rank: the median time of a forward and of a forward + backward step (every rank starts
together after a barrier; CUDA timed with synchronizations around the call). Summary: the
slowest rank's times, TFLOP/s for the whole sequence (4 B H S^2 D for the forward, 3.5x
that for the step, halved when causal), the scaling efficiency T_single / (world x
T_ring), and the ring's time over that of the same calls and merges without the transfers
(every step on the rank's own K/V shard: 1.0 when the communication is hidden). On CPU the
ranks share this machine's cores (--threads per rank).
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time


def _flops(a):
    f = 4.0 * a.batch * a.heads * a.seq * a.seq * a.head_dim
    return f / 2 if a.causal else f


def time_median(torch, fn, iters, cuda, barrier=None):
    """Median seconds of fn over `iters` calls after two warm-up calls, each call started after
    `barrier` (if given) and, on CUDA, synchronized before and after (the peer script
    bench/peers/torch_cp.py times PyTorch's ring with it too)."""
    for _ in range(2):
        fn()
    ts = []
    for _ in range(iters):
        if barrier is not None:
            barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _worker(rank, world, init_file, a, out_file):
    import torch
    import torch.distributed as dist

    import flashcore
    import flashcore.distributed as fd

    cuda = a.backend == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    g = torch.Generator().manual_seed(0)
    hkv = a.kv_heads or a.heads
    q = torch.randn(a.batch, a.seq, a.heads, a.head_dim, generator=g).to(dev, dt)
    k = torch.randn(a.batch, a.seq, hkv, a.head_dim, generator=g).to(dev, dt)
    v = torch.randn(a.batch, a.seq, hkv, a.head_dim, generator=g).to(dev, dt)
    dout = torch.randn(a.batch, a.seq, a.heads, a.head_dim, generator=g).to(dev, dt)
    threads = a.threads or None
    row = {"rank": rank, "world": world}
    if rank == 0:  # our own single call over the whole sequence
        qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
        row["single_fwd_s"] = time_median(torch, lambda: flashcore.attention(q, k, v, causal=a.causal, threads=threads),
                                          a.iters, cuda)

        def step():
            o = flashcore.attention(qs, ks, vs, causal=a.causal, threads=threads)
            o.backward(dout)
        if not a.forward_only:
            row["single_step_s"] = time_median(torch, step, a.iters, cuda)
    dist.barrier()
    mine = [fd.shard(x, rank, world, a.layout).contiguous() for x in (q, k, v)]
    dmine = fd.shard(dout, rank, world, a.layout).contiguous()
    row["fwd_s"] = time_median(torch, lambda: fd.ring_attention(*mine, causal=a.causal, layout=a.layout,
                                                                threads=threads), a.iters, cuda, dist.barrier)
    grads = [x.clone().requires_grad_(True) for x in mine]

    def ring_step():
        o = fd.ring_attention(*grads, causal=a.causal, layout=a.layout, threads=threads)
        o.backward(dmine)
    if not a.forward_only:
        row["step_s"] = time_median(torch, ring_step, a.iters, cuda, dist.barrier)
    # The same calls and merges without the transfers (every step on the rank's own K/V
    # shard): the ring's time against this is what its communication costs.
    scale = a.head_dim ** -0.5
    args = (a.causal, a.layout, scale, None, threads, None, None)
    row["fwd_compute_s"] = time_median(torch, lambda: fd._forward(*mine, None, *args, exchange=False), a.iters, cuda)
    if not a.forward_only:
        o, lse = fd._forward(*mine, None, *args)
        row["bwd_compute_s"] = time_median(torch, lambda: fd._backward(*mine, o, dmine, lse, *args, exchange=False),
                                     a.iters, cuda)
    with open(f"{out_file}.{rank}", "w") as f:
        json.dump(row, f)
    dist.destroy_process_group()


def run(a) -> list[dict]:
    import torch.multiprocessing as mp

    fd, init_file = tempfile.mkstemp(prefix="fc_ring_bench_")
    os.close(fd)
    os.unlink(init_file)
    out_file = init_file + ".rows"
    try:
        mp.spawn(_worker, args=(a.world, init_file, a, out_file), nprocs=a.world, join=True)
        rows = []
        for r in range(a.world):
            with open(f"{out_file}.{r}") as f:
                rows.append(json.load(f))
            os.unlink(f"{out_file}.{r}")
        return rows
    finally:
        if os.path.exists(init_file):
            os.unlink(init_file)


def main(a) -> None:
    if a.seq % (a.world * (2 if a.layout == "zigzag" else 1)) != 0:
        raise SystemExit(f"flashcore.bench: --seq-q {a.seq} must split evenly over the ranks ({a.layout})")
    rows = run(a)
    fwd = max(r["fwd_s"] for r in rows)
    step = None if a.forward_only else max(r["step_s"] for r in rows)
    single = rows[0]
    flops = _flops(a)
    summary = {"op": "ring-attention", "backend": a.backend, "world": a.world, "layout": a.layout,
               "dtype": a.dtype, "B": a.batch, "H": a.heads, "Hkv": a.kv_heads or a.heads, "S": a.seq,
               "D": a.head_dim, "causal": a.causal, "fwd_ms": fwd * 1e3,
               "fwd_tflops": flops / fwd * 1e-12, "single_fwd_ms": single["single_fwd_s"] * 1e3,
               "fwd_scaling": single["single_fwd_s"] / (a.world * fwd),
               "fwd_compute_ms": max(r["fwd_compute_s"] for r in rows) * 1e3,
               "fwd_over_compute": fwd / max(r["fwd_compute_s"] for r in rows),
               "per_rank_ms": [{"rank": r["rank"], "fwd": r["fwd_s"] * 1e3, "step": r.get("step_s", 0) * 1e3}
                               for r in rows]}
    if step is not None:
        comp = max(r["fwd_compute_s"] + r["bwd_compute_s"] for r in rows)
        summary.update(step_compute_ms=comp * 1e3, step_over_compute=step / comp)
        summary.update(step_ms=step * 1e3, step_tflops=3.5 * flops / step * 1e-12,
                       single_step_ms=single["single_step_s"] * 1e3,
                       step_scaling=single["single_step_s"] / (a.world * step))
    if a.json:
        print(json.dumps(summary))
        return
    print(f"ring attention, {a.world} ranks ({a.backend}, {a.layout}), {a.dtype} B{a.batch} H{a.heads}/"
          f"{a.kv_heads or a.heads} S{a.seq} D{a.head_dim}{' causal' if a.causal else ''}")
    for r in summary["per_rank_ms"]:
        print(f"  rank {r['rank']}: forward {r['fwd']:.2f} ms" +
              ("" if step is None else f", forward + backward {r['step']:.2f} ms"))
    print(f"  forward {fwd * 1e3:.2f} ms ({summary['fwd_tflops']:.3f} TFLOP/s), one device "
          f"{summary['single_fwd_ms']:.2f} ms: scaling {summary['fwd_scaling']:.2f}; without the transfers "
          f"{summary['fwd_compute_ms']:.2f} ms ({summary['fwd_over_compute']:.3f}x)")
    if step is None:
        return
    print(f"  forward + backward {step * 1e3:.2f} ms ({summary['step_tflops']:.3f} TFLOP/s), one device "
          f"{summary['single_step_ms']:.2f} ms: scaling {summary['step_scaling']:.2f}; without the transfers "
          f"{summary['step_compute_ms']:.2f} ms ({summary['step_over_compute']:.3f}x)")
