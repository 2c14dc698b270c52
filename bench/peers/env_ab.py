#!/usr/bin/env python3
"""flashcore against itself with an environment switch set, in one process: A/B of two
paths of the library on the same inputs (e.g. FLASHCORE_SM90_VT_PREPASS=1, the e4m3 V^T
pre-pass instead of V^T made in the kernel).

Per shape (e4m3 randn q, k, v rounded, bf16 output written into one buffer): both sides'
outputs are compared bit for bit (`bitwise_same`; a NaN in the output shows as `nan`),
then both are warmed up and timed in rounds, alternating, with sdpa_interleaved.py's
helpers: per call (`--timing events`: CUDA events around each call; `isolated`: cuDNN's
published method, see sdpa_interleaved.py) and back to back. `x` = the switched side's
time / the default side's (median of the per-round ratios), > 1 where the default path
is faster.

  python3 bench/peers/env_ab.py [--env FLASHCORE_SM90_VT_PREPASS=1] [--timing events|isolated]
      [--shapes "B,Hq,Hkv,S,D;..."] [--rounds 3] [--iters 10]

Needs torch with CUDA and the flashcore Python package built with CUDA (pip install .).
Session 37's runs: docs/results/cuda-sm90-fp8-cudnn-method-2026-11-27.md.
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdpa_interleaved as si  # noqa: E402 (the timing helpers beside this file)

import flashcore  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="FLASHCORE_SM90_VT_PREPASS=1", help="VAR=VALUE set for the switched side's calls")
    ap.add_argument("--timing", default="events", choices=["events", "isolated"])
    ap.add_argument("--shapes", default="32,16,16,512,128;8,16,16,2048,128;4,16,16,4096,128",
                    help="B,Hq,Hkv,S,D separated by ';'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    var, _, value = args.env.partition("=")
    shapes = [tuple(int(v) for v in x.split(",")) for x in args.shapes.split(";")]
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda") if args.timing == "isolated" else None
    for b, h, hkv, s, d in shapes:
        for causal in (False, True):
            q, k, v = (torch.randn(b, s, hh, d, device="cuda", dtype=torch.float16).to(torch.float8_e4m3fn)
                       for hh in (h, hkv, hkv))
            out = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)

            def side(switched):
                def call():
                    if switched:
                        os.environ[var] = value
                    else:
                        os.environ.pop(var, None)
                    return flashcore.attention(q, k, v, causal=causal, out=out)
                return call
            fns = {"default": side(False), "switched": side(True)}
            outs = {}
            for n, f in fns.items():
                out.fill_(float("nan"))
                f()
                torch.cuda.synchronize()
                outs[n] = out.clone()
            os.environ.pop(var, None)
            row = {"B": b, "H": h, "Hkv": hkv, "S": s, "D": d, "causal": causal, "timing": args.timing, "env": args.env,
                   "bitwise_same": bool(torch.equal(outs["default"], outs["switched"])),
                   "nan": bool(torch.isnan(outs["default"]).any()), "kernel": si.kernel_of(q, k, v, causal)}
            for f in fns.values():
                si.warm(f, 200)
            us = {n: [] for n in fns}
            b2b = {n: [] for n in fns}
            for _ in range(args.rounds):
                for n, f in fns.items():
                    us[n].append(si.isolated_us(f, args.iters, flush) if flush is not None
                                 else si.event_median_us(f, args.iters))
                    b2b[n].append(si.b2b_us(f, 10))
            os.environ.pop(var, None)
            flop = 4 * b * h * s * s * d / (2 if causal else 1)
            for n in fns:
                row[n + "_tflops"] = round(flop / statistics.median(us[n]) / 1e6, 1)
                row[n + "_b2b_tflops"] = round(flop / statistics.median(b2b[n]) / 1e6, 1)
            row["x"] = round(statistics.median(p / f for p, f in zip(us["switched"], us["default"])), 3)
            row["x_b2b"] = round(statistics.median(p / f for p, f in zip(b2b["switched"], b2b["default"])), 3)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
