#!/usr/bin/env python3
"""The score variants against the plain call on one backend, one table.

Each round runs, per shape and dtype, flashcore-bench's plain call and each variant's (softcap
C, ALiBi with the paper's slopes, sinks; with --fast also softcap C under --exp fast), call
after call, so that every variant meets the plain call of its own round. The table gives per
row the median over rounds of each call's p50 and the median of the per-round ratios plain /
variant (1.00: the variant is free; the variants' line asks >= 0.90 at D 128, S 8192). Raw
JSON lines go to --raw; --only softcap,alibi,... times those variants alone besides plain.

  FLASHCORE_BENCH=build/release/bench/flashcore-bench python3 bench/peers/variants_table.py \
      --backend cuda --dtypes bf16,f16 --rounds 3 [--fast] [--softcap 30] [--shapes B,H,S,D[,c]] ...
  (a trailing ",c" makes a shape causal; CPU rows take --threads)
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_forward_table import run_json  # noqa: E402  (one JSON-lines runner for the peers' tables)

CUDA_SHAPES = ["2,16,8192,128", "2,16,8192,128,c", "16,16,1024,128", "16,16,1024,128,c", "4,32,4096,64",
               "4,32,4096,64,c"]
CPU_SHAPES = ["1,8,1024,64", "1,16,2048,128", "1,16,2048,128,c"]


def variants(softcap, fast):
    v = [("plain", []), ("softcap", ["--softcap", softcap]), ("alibi", ["--alibi"]), ("sinks", ["--sinks"])]
    if fast:
        v.append(("softcap fast", ["--softcap", softcap, "--exp", "fast"]))
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--shapes", action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: the library's default)")
    ap.add_argument("--softcap", default="30")
    ap.add_argument("--fast", action="store_true", help="also softcap under --exp fast")
    ap.add_argument("--raw", default="")
    ap.add_argument("--only", default="", help="comma-separated variants to time besides plain (default: all)")
    a = ap.parse_args()
    bench = os.environ.get("FLASHCORE_BENCH", "build/release/bench/flashcore-bench")
    shapes = a.shapes or (CUDA_SHAPES if a.backend == "cuda" else CPU_SHAPES)
    vs = variants(a.softcap, a.fast)
    if a.only:
        vs = [v for v in vs if v[0] == "plain" or v[0] in a.only.split(",")]
    times = {}   # (shape, dtype, variant) -> [p50 per round]
    ratios = {}  # (shape, dtype, variant) -> [plain / variant per round]
    kernels = {}
    raw = open(a.raw, "w") if a.raw else None
    for rnd in range(a.rounds):
        for s in shapes:
            parts = s.split(",")
            b, h, sq, d = parts[:4]
            for dt in a.dtypes.split(","):
                base = [bench, "--backend", a.backend, "--dtype", dt, "--batch", b, "--heads", h, "--seq-q", sq,
                        "--head-dim", d, "--iters", str(a.iters), "--json"] + (["--causal"] if len(parts) == 5 else [])
                if a.threads > 0:
                    base += ["--threads", str(a.threads)]
                plain = None
                for name, extra in vs:
                    got = run_json(base + extra)
                    if not got:
                        continue
                    r = got[0]
                    key = (s, dt, name)
                    times.setdefault(key, []).append(r["p50_us"])
                    kernels[key] = r.get("kernel", "")
                    if name == "plain":
                        plain = r["p50_us"]
                    elif plain is not None:
                        ratios.setdefault(key, []).append(plain / r["p50_us"])
                    if raw:
                        raw.write(json.dumps(dict(r, round=rnd, variant=name)) + "\n")
                print(f"round {rnd} {s} {dt} done", file=sys.stderr, flush=True)
    cols = [n for n, _ in vs if n != "plain"]
    print(f"| dtype | B, H, S, D | causal | plain µs | " + " | ".join(f"{c} µs (plain / it)" for c in cols) +
          " | variant kernel |")
    print("|---" * (5 + len(cols)) + "|")
    for s in shapes:
        parts = s.split(",")
        for dt in a.dtypes.split(","):
            if (s, dt, "plain") not in times:
                continue
            cells = []
            for c in cols:
                t, q = times.get((s, dt, c)), ratios.get((s, dt, c))
                cells.append(f"{statistics.median(t):.1f} ({statistics.median(q):.2f}x)" if t and q else "-")
            print(f"| {dt} | {', '.join(parts[:4])} | {'yes' if len(parts) == 5 else 'no'} | "
                  f"{statistics.median(times[(s, dt, 'plain')]):.1f} | " + " | ".join(cells) +
                  f" | {kernels.get((s, dt, 'alibi'), '')} |")


if __name__ == "__main__":
    main()
