#!/usr/bin/env python3
"""PyTorch CPU scaled_dot_product_attention at decode shapes (Sq small, GQA), the peer of
flashcore-bench's decode rows (docs/results/cpu-avx2-2026-11-25.md).

    python3 bench/peers/torch_decode.py [--heads 32 --kv-heads 8 --seq-q 1 --seq-k 8192
        --head-dim 128 --threads 2 --iters 30 --dtypes "f32 bf16 f16"]

Needs torch (PyPI). Prints, per dtype, the median time of --iters calls after 3 warm-up
calls, with the kv heads given as they are (enable_gqa=True) and expanded to every query
head by repeat_interleave.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

a = argparse.ArgumentParser()
for name, default in (("batch", 1), ("heads", 32), ("kv-heads", 8), ("seq-q", 1), ("seq-k", 8192),
                      ("head-dim", 128), ("threads", 2), ("iters", 30)):
    a.add_argument("--" + name, type=int, default=default)
a.add_argument("--dtypes", default="f32 bf16 f16")
o = a.parse_args()
torch.set_num_threads(o.threads)
B, H, Hkv, Sq, Sk, D = o.batch, o.heads, o.kv_heads, o.seq_q, o.seq_k, o.head_dim
types = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
print("torch", torch.__version__, "cpu capability", torch.backends.cpu.get_cpu_capability(),
      "threads", o.threads)
for name in o.dtypes.split():
    dt = types[name]
    q = torch.randn(B, H, Sq, D).to(dt)
    k = torch.randn(B, Hkv, Sk, D).to(dt)
    v = torch.randn(B, Hkv, Sk, D).to(dt)
    for gqa in (True, False):
        kk, vv = (k, v) if gqa else (k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1))

        def call():
            return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=gqa)

        for _ in range(3):
            call()
        ts = []
        for _ in range(o.iters):
            t = time.perf_counter()
            call()
            ts.append(time.perf_counter() - t)
        m = statistics.median(ts)
        print("%-4s %-10s median %8.0f us  %7.2f GFLOP/s" %
              (name, "enable_gqa" if gqa else "expanded", m * 1e6, 4 * B * H * Sq * Sk * D / m / 1e9),
              flush=True)
