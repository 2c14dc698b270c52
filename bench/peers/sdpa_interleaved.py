#!/usr/bin/env python3
"""flashcore against PyTorch's SDPA backends in one process, calls interleaved.

sdpa_peers.py and flashcore_cuda_timing time the two sides in separate processes, one
after the other, each with its own warm-up; on a GPU whose clock follows its power draw
(an H200 under sustained tensor work) the side that runs in short bursts gets higher
clocks. Here every shape is timed in rounds: each side warms up for at least `--warm-ms`,
then the rounds alternate the sides (ours, cuDNN, FA2, ours, ...), each round a median of
`--iters` CUDA-event-timed calls, and the row reports the median over rounds of each side
and of the per-round ratios. Inputs: the same random values in each side's native layout
(ours [B, S, H, D], SDPA [B, H, S, D], both contiguous).

  python3 bench/peers/sdpa_interleaved.py [--dtype f16|bf16] [--hdims 64,128,256] [--seqs 512,2048]
      [--rounds 5] [--iters 10] [--warm-ms 200] [--all-kernels]

Needs torch with CUDA and the flashcore Python package built with CUDA (pip install .).
Prints one JSON line per shape: us and TFLOP/s per side, ratio = peer time / ours, and the
kernel the dispatcher chose for ours (ours_kernel).
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore

SIDES = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def kernel_of(q, k, v, causal):
    """The kernel the dispatcher runs for this call (the name PhaseTimes reports, from one
    more call through the C++ timing loop), or None where that call fails."""
    try:
        out = torch.empty_like(q)
        return flashcore._core.attention_loop(q, k, v, out, None, 0.0, causal, -1, -1, 0, 0, None, None, 0,
                                              None, torch.cuda.current_stream(q.device).cuda_stream,
                                              False, 1)[1] or None
    except Exception:  # noqa: BLE001 (a name is a nicety: never lose the row for it)
        return None


def event_median_us(fn, iters):
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def warm(fn, ms):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    n = 0
    while True:
        fn()
        n += 1
        b.record()
        b.synchronize()
        if n >= 5 and a.elapsed_time(b) >= ms:
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--seqs", default="512,2048,8192,16384")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warm-ms", type=float, default=200.0)
    ap.add_argument("--all-kernels", action="store_true",
                    help="also every available CUDA kernel of the dtype and head dim, forced by key")
    args = ap.parse_args()
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    for d in (int(x) for x in args.hdims.split(",")):
        for s in (int(x) for x in args.seqs.split(",")):
            for causal in (False, True):
                b, h = max(16384 // s, 1), 2048 // d
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
                qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                fns = {"ours": lambda: flashcore.attention(q, k, v, causal=causal)}
                if args.all_kernels:
                    tail = "%s_hd%d_" % (args.dtype, d)
                    for key, _, ok in flashcore.list_kernels():
                        if ok and (key.startswith("fwd_sm90_" + tail) or key.startswith("fwd_sm80_" + tail)):
                            fns[key] = lambda key=key: flashcore.attention(q, k, v, causal=causal, impl=key)
                for name, be in SIDES.items():
                    def call(be=be):
                        with sdpa_kernel(be):
                            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    try:
                        call()
                        fns[name] = call
                    except RuntimeError:
                        pass  # this backend does not take the shape
                for fn in fns.values():
                    warm(fn, args.warm_ms)
                us = {n: [] for n in fns}
                for _ in range(args.rounds):
                    for n, fn in fns.items():
                        us[n].append(event_median_us(fn, args.iters))
                flop = 4 * b * h * s * s * d / (2 if causal else 1)
                row = {"dtype": args.dtype, "B": b, "H": h, "S": s, "D": d, "causal": causal,
                       "ours_kernel": kernel_of(q, k, v, causal)}
                for n, t in us.items():
                    row[n + "_us"] = round(statistics.median(t), 1)
                    row[n + "_tflops"] = round(flop / statistics.median(t) / 1e6, 1)
                    if n != "ours":
                        row["x_" + n] = round(statistics.median(p / o for p, o in zip(t, us["ours"])), 3)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
