#!/usr/bin/env python3
"""flashcore's CPU attention forward beside PyTorch CPU SDPA, alternating, one table.

Each round runs, per thread count, flashcore-bench (--json) and PyTorch (cpu_sdpa_peers.py
--serve, one process per round and thread count) row by row, alternating, both pinned to the
first N cores with taskset when N is below the machine's count. The table gives per row the median GFLOP/s over rounds of
each side and the median of the per-round ratios (flashcore / PyTorch; > 1: flashcore is
faster). Raw JSON lines go to --raw.

  FLASHCORE_BENCH=build/cpu/bench/flashcore-bench python3 bench/peers/cpu_forward_table.py \
      --threads 2,16 --rounds 3 [--dtypes bf16,f16,f32] [--shapes B,H,Hkv,Sq,Sk,D[,c]] ...
  (a trailing ",c" makes a shape causal; default: the x86 target shapes, plus causal and GQA rows)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHAPES = ["1,8,8,512,512,64", "1,16,16,2048,2048,128", "1,32,2,512,10000,256",
                  "1,16,16,2048,2048,128,c", "1,32,8,2048,2048,128", "1,32,8,2048,2048,128,c"]


def run_json(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}\n")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="bf16,f16,f32")
    ap.add_argument("--shapes", action="append")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--raw", default="")
    a = ap.parse_args()
    bench = os.environ.get("FLASHCORE_BENCH", "build/cpu/bench/flashcore-bench")
    ncpu = os.cpu_count()
    shapes = a.shapes or DEFAULT_SHAPES
    rows = {}  # key -> {"fc": [..], "torch": [..], "ratio": [..], "kernel": str}
    raw = open(a.raw, "w") if a.raw else None
    for rnd in range(a.rounds):
        for nt in (int(t) for t in a.threads.split(",")):
            pin = ["taskset", "-c", f"0-{nt - 1}"] if nt < ncpu else []
            # PyTorch in one process per round and thread count (its import takes seconds),
            # fed row by row between flashcore's rows.
            peer = subprocess.Popen(pin + [sys.executable, os.path.join(HERE, "cpu_sdpa_peers.py"), "--serve",
                                           "--threads", str(nt), "--calls", str(a.iters)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for s in shapes:
                parts = s.split(",")
                causal = len(parts) == 7
                b, h, hkv, sq, sk, d = parts[:6]
                for dt in a.dtypes.split(","):
                    got = run_json(pin + [bench, "--dtype", dt, "--batch", b, "--heads", h, "--kv-heads", hkv,
                                          "--seq-q", sq, "--seq-k", sk, "--head-dim", d, "--threads", str(nt),
                                          "--iters", str(a.iters), "--json"] + (["--causal"] if causal else []))
                    peer.stdin.write(f"{','.join(parts[:6])},{int(causal)},{dt}\n")
                    peer.stdin.flush()
                    line = peer.stdout.readline()
                    if not got or not line.startswith("{"):
                        continue
                    f, t = got[0], json.loads(line)
                    r = rows.setdefault((nt, s, dt), {"fc": [], "torch": [], "ratio": [], "kernel": ""})
                    r["fc"].append(f["gflops"])
                    r["torch"].append(t["gflops"])
                    r["ratio"].append(f["gflops"] / t["gflops"])
                    r["kernel"] = f'{f.get("kernel", "")} {f.get("strategy", "")}'
                    if raw:
                        for x in (f, t):
                            raw.write(json.dumps(dict(x, round=rnd)) + "\n")
                    print(f"round {rnd} threads {nt} {s} {dt}: flashcore {f['gflops']:.1f} torch {t['gflops']:.1f}",
                          file=sys.stderr, flush=True)
            peer.stdin.close()
            peer.wait()
    print("| threads | shape B,H,Hkv,Sq,Sk,D | causal | dtype | flashcore GFLOP/s | PyTorch GFLOP/s | "
          "ratio (median of rounds) | range | kernel |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (nt, s, dt), r in rows.items():
        parts = s.split(",")
        print(f"| {nt} | {','.join(parts[:6])} | {'yes' if len(parts) == 7 else 'no'} | {dt} | "
              f"{statistics.median(r['fc']):.1f} | {statistics.median(r['torch']):.1f} | "
              f"{statistics.median(r['ratio']):.2f} | {min(r['ratio']):.2f}-{max(r['ratio']):.2f} | {r['kernel']} |")


if __name__ == "__main__":
    main()
