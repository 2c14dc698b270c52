"""PyTorch's own context parallelism as the peer of flashcore.distributed.ring_attention:
torch.distributed.tensor.experimental.context_parallel() over aten's SDPA (cuDNN or
FlashAttention-2 kernels, chosen with torch.nn.attention.sdpa_kernel), one process per GPU
over NCCL, the same shapes and timing rule as `python -m flashcore.bench --op
ring-attention` (median of --iters after two warm-up calls, every rank starting after a
barrier, synchronised around the call: flashcore.ring_bench.time_median, so flashcore must be
importable; the slowest rank's time), and the same SDPA kernel over the whole sequence on
rank 0's GPU alone for the scaling figure.

    python3 bench/peers/torch_cp.py --world 2 --seq 131072 --heads 32 --head-dim 128 \
        --kernel cudnn --causal [--forward-only] [--json]

Needs as many CUDA GPUs as --world. Prints one line per kernel (JSON with --json).
"""
import argparse
import json
import os
import tempfile


def _worker(rank, a, init_file, out_file):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashcore.ring_bench import time_median

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=a.world,
                            device_id=dev)
    mesh = init_device_mesh("cuda", (a.world,))
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[a.kernel]
    g = torch.Generator().manual_seed(0)
    shape = (a.batch, a.heads, a.seq, a.head_dim)  # SDPA's layout: the sequence is dim 2
    q, k, v, dout = (torch.randn(*shape, generator=g).to(dev, torch.bfloat16) for _ in range(4))
    row = {"rank": rank}
    with sdpa_kernel(backend):
        if rank == 0:
            qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)  # noqa: E731
            row["single_fwd_s"] = time_median(torch, fwd, a.iters, True)

            def single_step():
                F.scaled_dot_product_attention(qs, ks, vs, is_causal=a.causal).backward(dout)
            if not a.forward_only:
                row["single_step_s"] = time_median(torch, single_step, a.iters, True)
        dist.barrier()
        # context_parallel shards the buffers in place along dim 2 (load-balanced for causal)
        with context_parallel(mesh, buffers=[q, k, v, dout], buffer_seq_dims=[2, 2, 2, 2]):
            row["fwd_s"] = time_median(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal),
                                       a.iters, True, dist.barrier)
            qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))

            def step():
                F.scaled_dot_product_attention(qg, kg, vg, is_causal=a.causal).backward(dout)
            if not a.forward_only:
                row["step_s"] = time_median(torch, step, a.iters, True, dist.barrier)
    with open(f"{out_file}.{rank}", "w") as f:
        json.dump(row, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--seq", type=int, default=32768)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--kernel", choices=["cudnn", "flash"], default="cudnn")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import torch.multiprocessing as mp

    fd, init_file = tempfile.mkstemp(prefix="fc_torch_cp_")
    os.close(fd)
    os.unlink(init_file)
    out_file = init_file + ".rows"
    mp.spawn(_worker, args=(a, init_file, out_file), nprocs=a.world, join=True)
    rows = []
    for r in range(a.world):
        with open(f"{out_file}.{r}") as f:
            rows.append(json.load(f))
        os.unlink(f"{out_file}.{r}")
    if os.path.exists(init_file):
        os.unlink(init_file)
    s = {"peer": f"torch-context_parallel-{a.kernel}", "world": a.world, "B": a.batch, "H": a.heads, "S": a.seq,
         "D": a.head_dim, "causal": a.causal, "fwd_ms": max(r["fwd_s"] for r in rows) * 1e3,
         "single_fwd_ms": rows[0]["single_fwd_s"] * 1e3}
    s["fwd_scaling"] = s["single_fwd_ms"] / (a.world * s["fwd_ms"])
    if not a.forward_only:
        s["step_ms"] = max(r["step_s"] for r in rows) * 1e3
        s["single_step_ms"] = rows[0]["single_step_s"] * 1e3
        s["step_scaling"] = s["single_step_ms"] / (a.world * s["step_ms"])
    if a.json:
        print(json.dumps(s))
        return
    print(f"{s['peer']}, {a.world} ranks, bf16 B{a.batch} H{a.heads} S{a.seq} D{a.head_dim}"
          f"{' causal' if a.causal else ''}: forward {s['fwd_ms']:.2f} ms (one GPU {s['single_fwd_ms']:.2f}, "
          f"scaling {s['fwd_scaling']:.2f})" +
          ("" if a.forward_only else f", forward + backward {s['step_ms']:.2f} ms (one GPU "
           f"{s['single_step_ms']:.2f}, scaling {s['step_scaling']:.2f})"))


if __name__ == "__main__":
    main()
