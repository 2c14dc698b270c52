#!/usr/bin/env python3
"""Joins flashcore_cuda_timing and sdpa_peers.py JSON lines into a markdown table with
ratios (flashcore time / peer time inverted: > 1.0 means flashcore is faster).

  python3 bench/peers/compare.py flashcore.jsonl peers.jsonl
"""
import json
import sys


def load(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def key(r):
    return (r.get("dtype"), r.get("B"), r.get("H"), r.get("S"), r.get("D"), bool(r.get("causal")))


def main():
    ours = [r for r in load(sys.argv[1]) if "us" in r]
    peers = {}
    for r in load(sys.argv[2]):
        if "backend" in r:
            peers[(key(r), r["backend"])] = r
    best = {}
    for r in ours:  # with --all-tiles, keep the fastest tile per shape
        k = key(r)
        if k not in best or r["us"] < best[k]["us"]:
            best[k] = r
    names = []  # peer backends in the order they appear (flash, cudnn; efficient for f32)
    for (_, b) in peers:
        if b not in names:
            names.append(b)
    print("| dtype | B,H,S,D | causal | flashcore kernel | us | TFLOP/s | "
          + " | ".join(f"{n} TFLOP/s" for n in names) + " | " + " | ".join(f"vs {n}" for n in names) + " |")
    print("|---|---|---|---|---|---|" + "---|" * (2 * len(names)))
    graph_rows = []
    for k, r in best.items():
        ps = [peers.get((k, n), {}) for n in names]
        def ratio(p):
            return f"{p['us'] / r['us']:.2f}x" if "us" in p else "n/a"
        print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]} | {'yes' if k[5] else 'no'} | {r['kernel']} | {r['us']:.1f} | "
              f"{r['tflops']:.0f} | " + " | ".join(str(p.get('tflops', 'n/a')) for p in ps) + " | "
              + " | ".join(ratio(p) for p in ps) + " |")
        if r.get("graph_us", -1) > 0:
            graph_rows.append((k, r, ps))
    if graph_rows:
        print()
        print("Short shapes, per call inside a CUDA graph of 20 calls (kernel time without launch/dispatch gaps):")
        print()
        print("| dtype | B,H,S,D | causal | flashcore us | " + " | ".join(f"{n} us" for n in names) + " | "
              + " | ".join(f"vs {n}" for n in names) + " |")
        print("|---|---|---|---|" + "---|" * (2 * len(names)))
        for k, r, ps in graph_rows:
            def gr(p):
                return f"{p['graph_us'] / r['graph_us']:.2f}x" if "graph_us" in p else "n/a"
            print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]} | {'yes' if k[5] else 'no'} | {r['graph_us']:.1f} | "
                  + " | ".join(str(p.get("graph_us", "n/a")) for p in ps) + " | " + " | ".join(gr(p) for p in ps) + " |")

if __name__ == "__main__":
    main()
