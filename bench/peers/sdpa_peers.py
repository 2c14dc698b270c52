#!/usr/bin/env python3
"""PyTorch SDPA peers for flashcore's CUDA rows.

Times torch.nn.functional.scaled_dot_product_attention forward with the FlashAttention-2
backend ("flash") and the cuDNN backend ("cudnn") on the shapes flashcore's CUDA timing
driver runs (seed mission B1 H8 S512 D64, and BENCH.md's grid D in {64,128,256},
S in {512..16384}, B = 16384/S, H = 2048/D, causal and not), fp16 and bf16; fp32 with the
memory-efficient backend ("efficient"; FA2 and cuDNN take no fp32), TF32 matmuls allowed. Timing as in
flashcore_cuda_timing: per-call CUDA events, median after warm-up. TFLOP/s counts
4*B*H*S*S*D, halved for causal. One JSON line per (shape, backend).

  python3 bench/peers/sdpa_peers.py [--dtype f16|bf16|f32|both|all] [--iters N] [--only-mission]
                                    [--hdims 64,128]   (grid shapes of these head dims only)
                                    [--gqa] [--decode]  (GQA rows; the serving grid's decode rows only)
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
F32_BACKENDS = {"efficient": SDPBackend.EFFICIENT_ATTENTION}
NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


def median_ms(fn, iters, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def graph_us(fn, calls=20, reps=20):
    """Per-call time of `calls` launches captured in one CUDA graph (no Python or launch gaps)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    ms = median_ms(g.replay, reps, warm=2)
    return ms * 1e3 / calls


def shapes(only_mission, hdims=(64, 128, 256)):
    out = [("seed-mission", 1, 8, 512, 64, False), ("seed-mission", 1, 8, 512, 64, True)]
    if not only_mission:
        for d in hdims:
            for s in (512, 2048, 8192, 16384):
                for causal in (False, True):
                    out.append(("grid", 16384 // s, 2048 // d, s, d, causal))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="both", choices=["f16", "bf16", "f32", "both", "all"])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--only-mission", action="store_true")
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--gqa", action="store_true", help="also GQA 32/8 rows (decode, 16 queries)")
    ap.add_argument("--decode", action="store_true",
                    help="only the serving grid's decode rows (D128, one query, H32/8; B64 H64/8), as "
                         "flashcore-bench --op decode times them")
    args = ap.parse_args()
    dts = {"f16": [torch.float16], "bf16": [torch.bfloat16], "f32": [torch.float32],
           "both": [torch.float16, torch.bfloat16],
           "all": [torch.float16, torch.bfloat16, torch.float32]}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = True
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "cudnn": torch.backends.cudnn.version()}), flush=True)
    for dt in dts:
        name = NAMES[dt]
        backends = F32_BACKENDS if dt == torch.float32 else BACKENDS
        # (tag, B, H, S, D, causal, Hkv = H, Sq = S)
        rows = [r + (r[2], r[3]) for r in shapes(args.only_mission, [int(x) for x in args.hdims.split(",")])]
        if args.decode:  # B x Sk >= 131072 (the serving grid), one query per sequence
            rows = [("decode", b, 32, s, 128, False, 8, 1)
                    for b, s in ((1, 131072), (8, 16384), (8, 32768), (32, 4096), (32, 32768))]
            rows += [("decode", 64, 64, 8192, 128, False, 8, 1)]
        if args.gqa:  # (tag, B, H, S = keys, D, causal, Hkv, Sq), as flashcore_cuda_timing --gqa
            rows += [("gqa", 32, 32, s, 128, False, 8, 1) for s in (4096, 8192)]
            rows += [("gqa", 8, 32, 4096, 128, False, 8, 16)]  # no mask: is_causal aligns Sq != Sk top-left
            rows += [("gqa", 1, 32, s, 128, False, 8, 1) for s in (4096, 16384, 65536)]  # few KV heads: KV splits
            rows += [("gqa", 4, 32, 8192, 128, False, 8, 1)]
        for tag, b, h, s, d, causal, hkv, sq in rows:
            # [B, H, S, D] views of [B, S, H, D] storage: the layout flashcore is timed on.
            q = torch.randn(b, sq, h, d, device="cuda", dtype=dt).transpose(1, 2)
            k, v = (torch.randn(b, s, hkv, d, device="cuda", dtype=dt).transpose(1, 2) for _ in range(2))
            flops = 4.0 * b * h * sq * s * d * (0.5 if causal and sq == s else 1.0)
            for backend, enum in backends.items():
                row = dict(tag=tag, backend=backend, dtype=name, B=b, H=h, S=s, D=d, causal=causal)
                if hkv != h or sq != s:
                    row.update(Hkv=hkv, Sq=sq)
                try:
                    with sdpa_kernel([enum]):
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)
                        ms = median_ms(fn, args.iters)
                    row.update(us=round(ms * 1e3, 2), tflops=round(flops / ms / 1e9, 1))
                    if sq <= 16:  # memory-bound rows: q, k, v read and out written once, GB/s
                        nbytes = 2 * (b * h * sq * d + b * hkv * s * d) * q.element_size()
                        row.update(gbps=round(nbytes / ms / 1e6, 1))
                    if ms < 0.1:  # short shapes: also without launch overhead, as flashcore_cuda_timing
                        with sdpa_kernel([enum]):
                            row.update(graph_us=round(graph_us(fn), 2))
                except Exception as ex:  # a backend that refuses a shape is reported, not fatal
                    row.update(error=str(ex).splitlines()[0][:100])
                print(json.dumps(row), flush=True)
            del q, k, v


if __name__ == "__main__":
    main()
