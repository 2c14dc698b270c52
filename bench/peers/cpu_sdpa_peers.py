#!/usr/bin/env python3
"""PyTorch CPU scaled_dot_product_attention forward on flashcore-bench's attention shapes.

One JSON line per (shape, dtype) with the fields flashcore-bench --json prints for the same
row (B, H, Hkv, Sq, Sk, D, causal, dtype, threads, p50_us, gflops), so that one table can join
both. GFLOP/s count 4 D per visible (query, key) pair, as flashcore-bench does (causal: the
bottom-right aligned mask, key j visible to query i when j <= i + Sk - Sq). Inputs are
BHSD (PyTorch's layout), normal random values; GQA through enable_gqa. The median of
--calls calls after --warm calls; torch.set_num_threads(--threads) (pin the process with
taskset for a fixed set of cores). --serve: rows read from stdin (one process, many rows).

  python3 bench/peers/cpu_sdpa_peers.py --threads 2 --dtypes bf16,f16,f32 \
      --shapes 1,8,8,512,512,64 --shapes 1,32,2,512,10000,256 [--causal] [--calls 10]
  (a shape: B,H,Hkv,Sq,Sk,D)
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def visible_pairs(sq, sk, causal):
    if not causal:
        return sq * sk
    return sum(min(sk, max(0, i + sk - sq + 1)) for i in range(sq))


def time_row(b, h, hkv, sq, sk, d, causal, name, calls, warm, threads):
    """One row: p50 of `calls` calls after `warm`, as a JSON-ready dict."""
    dt = DTYPES[name]
    q = torch.randn(b, h, sq, d, dtype=dt)
    k = torch.randn(b, hkv, sk, d, dtype=dt)
    v = torch.randn(b, hkv, sk, d, dtype=dt)
    # A causal mask aligned to the bottom right (Sq != Sk) as a boolean matrix; torch's
    # is_causal aligns it to the top left.
    mask = None
    if causal and sq != sk:
        i = torch.arange(sq).unsqueeze(1)
        j = torch.arange(sk).unsqueeze(0)
        mask = j <= i + sk - sq

    def call():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              enable_gqa=hkv != h)

    with torch.no_grad():
        for _ in range(warm):
            call()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    p50 = statistics.median(times)
    flops = 4.0 * b * h * d * visible_pairs(sq, sk, causal)
    return {"impl": "torch", "dtype": name, "B": b, "H": h, "Hkv": hkv, "Sq": sq, "Sk": sk, "D": d,
            "causal": causal, "threads": threads, "p50_us": p50 * 1e6, "gflops": flops / p50 * 1e-9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="bf16,f16,f32")
    ap.add_argument("--shapes", action="append", default=[], help="B,H,Hkv,Sq,Sk,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--serve", action="store_true",
                    help="read rows 'B,H,Hkv,Sq,Sk,D,causal(0/1),dtype' from stdin, one JSON line each")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.serve:
        for line in sys.stdin:
            f = line.strip().split(",")
            if len(f) != 8:
                continue
            b, h, hkv, sq, sk, d, c = (int(x) for x in f[:7])
            print(json.dumps(time_row(b, h, hkv, sq, sk, d, bool(c), f[7], a.calls, a.warm, a.threads)), flush=True)
        return
    for shape in a.shapes:
        b, h, hkv, sq, sk, d = (int(x) for x in shape.split(","))
        for name in a.dtypes.split(","):
            print(json.dumps(time_row(b, h, hkv, sq, sk, d, a.causal, name, a.calls, a.warm, a.threads)), flush=True)


if __name__ == "__main__":
    main()
