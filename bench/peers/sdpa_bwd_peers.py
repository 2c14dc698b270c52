#!/usr/bin/env python3
"""PyTorch SDPA's attention backward beside flashcore's (tests/cuda/bwd_timing.cpp,
flashcore_cuda_bwd_timing): the FlashAttention-2 backend ("flash") and the cuDNN backend
("cudnn") on the same grid, D in --hdims (default 64,128), S in --seqs (default
512..16384), B = 16384 / S, H = 2048 / D, causal and not, q / k / v / dO standard normal in
[B, S, H, D] memory (SDPA sees their [B, H, S, D] transposes, as flashcore's layout maps).

The backward's time is (forward + backward) - forward: the forward, and the forward
followed by torch.autograd.grad of (q, k, v) (no gradient accumulation), each the median of
per-call CUDA events after warm-up. TFLOP/s as FlashAttention counts the backward: 2.5 * 4 *
B * H * S * S * D, halved when causal. One JSON line per (shape, backend) with the keys
bench/peers/compare.py joins on:

  python3 bench/peers/sdpa_bwd_peers.py [--dtype bf16|f16] [--hdims 64,128] [--seqs 512,4096] [--iters N]
  python3 bench/peers/compare.py flashcore_bwd.jsonl peers_bwd.jsonl
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from sdpa_peers import BACKENDS, median_ms  # (this folder: the forward's peers, the same timing)

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    dt = DTYPES[args.dtype]
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "cudnn": torch.backends.cudnn.version()}), flush=True)
    for D in (int(x) for x in args.hdims.split(",")):
        for S in (int(x) for x in args.seqs.split(",")):
            for causal in (False, True):
                B, H = max(16384 // S, 1), 2048 // D
                gen = torch.Generator(device="cuda").manual_seed(S * 1000 + D)
                # [B, S, H, D] memory seen as [B, H, S, D]; detach() makes the views leaves.
                q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=dt, generator=gen).transpose(1, 2).detach()
                               for _ in range(4))
                for t in (q, k, v):
                    t.requires_grad_(True)
                flops = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
                for name, backend in BACKENDS.items():
                    row = {"tag": "bwd", "backend": name, "dtype": args.dtype, "B": B, "H": H, "S": S, "D": D,
                           "causal": causal}
                    try:
                        with sdpa_kernel([backend]):
                            def fwd():
                                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                            def fwd_bwd():
                                o = fwd()
                                torch.autograd.grad(o, (q, k, v), do)

                            tf = median_ms(fwd, args.iters)
                            tfb = median_ms(fwd_bwd, args.iters)
                        us = (tfb - tf) * 1e3
                        row.update({"fwd_us": round(tf * 1e3, 2), "fwd_bwd_us": round(tfb * 1e3, 2), "us": round(us, 2),
                                    "tflops": round(flops / us / 1e6, 1)})
                    except Exception as e:  # a backend that refuses the shape: say so, go on
                        row["error"] = str(e)[:160]
                    print(json.dumps(row), flush=True)
                del q, k, v, do
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
