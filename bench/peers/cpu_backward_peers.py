#!/usr/bin/env python3
"""flashcore's CPU attention backward beside PyTorch CPU SDPA's, same inputs, one process.

PyTorch's backward is timed as FlashAttention's papers and BENCH.md do: a forward +
backward step (scaled_dot_product_attention then .backward(dout)) minus a forward alone
(no_grad). flashcore's is flashcore.attention_backward on the forward's out and lse (made
once, not timed), and its step is flashcore.attention(return_lse=True) + attention_backward.
Rounds alternate the three measurements (ours, torch forward, torch step), each the median
of --calls calls; the table gives the median over rounds and the ratio per round's medians.
GFLOP/s: backward 2.5 x 4 B H S^2 D, step 3.5x (halved when causal). Inputs: BHSD memory
(torch's layout), read by flashcore as BSHD views of it. One JSON line per shape and dtype.

  python3 bench/peers/cpu_backward_peers.py [--threads 2] [--shapes 1,16,2048,128]
                                           [--dtypes f32,bf16] [--rounds 5] [--calls 3] [--causal]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import flashcore

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def median_s(fn, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(b, h, s, d, dtype, causal, threads, rounds, calls):
    gen = torch.Generator().manual_seed(0)
    qt, kt, vt, dot = (torch.randn(b, h, s, d, generator=gen).to(dtype) for _ in range(4))
    # flashcore: BSHD views of the same memory
    q, k, v, dout = (x.transpose(1, 2) for x in (qt, kt, vt, dot))
    out, lse = flashcore.attention(q, k, v, causal=causal, return_lse=True, threads=threads)
    grads = tuple(torch.empty_like(x) for x in (q, k, v))
    ours = lambda: flashcore.attention_backward(q, k, v, out, dout, lse, causal=causal, threads=threads,
                                                dq=grads[0], dk=grads[1], dv=grads[2])

    def ours_step():
        o, l = flashcore.attention(q, k, v, causal=causal, return_lse=True, threads=threads)
        flashcore.attention_backward(q, k, v, o, dout, l, causal=causal, threads=threads,
                                     dq=grads[0], dk=grads[1], dv=grads[2])

    qg, kg, vg = (x.clone().requires_grad_() for x in (qt, kt, vt))

    def torch_fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    def torch_step():
        qg.grad = kg.grad = vg.grad = None
        F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(dot)

    for fn in (ours, ours_step, torch_fwd, torch_step):  # warm-up
        fn()
    rows = []
    for _ in range(rounds):
        a, a_step = median_s(ours, calls), median_s(ours_step, calls)
        tf, ts = median_s(torch_fwd, calls), median_s(torch_step, calls)
        rows.append((a, a_step, tf, ts))
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    med = lambda i: statistics.median(r[i] for r in rows)
    ours_bwd, ours_step_s, t_fwd, t_step = med(0), med(1), med(2), med(3)
    t_bwd = t_step - t_fwd
    ratios = sorted((r[3] - r[2]) / r[0] for r in rows)
    return {
        "shape": f"B{b} H{h} S{s} D{d}" + (" causal" if causal else ""), "dtype": next(k for k, v in DTYPES.items() if v == dtype),
        "threads": threads, "torch": torch.__version__, "kernel_note": "flashcore auto kernel",
        "flashcore_bwd_ms": ours_bwd * 1e3, "flashcore_bwd_gflops": 2.5 * flops / ours_bwd / 1e9,
        "torch_bwd_ms": t_bwd * 1e3, "torch_bwd_gflops": 2.5 * flops / t_bwd / 1e9,
        "bwd_ratio": t_bwd / ours_bwd, "bwd_ratio_rounds": [round(x, 3) for x in ratios],
        "flashcore_step_ms": ours_step_s * 1e3, "torch_step_ms": t_step * 1e3,
        "step_ratio": t_step / ours_step_s, "torch_fwd_ms": t_fwd * 1e3, "rounds": rounds, "calls": calls,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="1,16,2048,128", help="B,H,S,D[;B,H,S,D...]")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for shape in a.shapes.split(";"):
        b, h, s, d = (int(x) for x in shape.split(","))
        for dt in a.dtypes.split(","):
            print(json.dumps(run(b, h, s, d, DTYPES[dt], a.causal, a.threads, a.rounds, a.calls)), flush=True)


if __name__ == "__main__":
    main()
