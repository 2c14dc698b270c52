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
    print("| dtype | B,H,S,D | causal | flashcore kernel | us | TFLOP/s | flash TFLOP/s | cudnn TFLOP/s | vs flash | vs cudnn |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    graph_rows = []
    for k, r in best.items():
        fl, cu = peers.get((k, "flash"), {}), peers.get((k, "cudnn"), {})
        def ratio(p):
            return f"{p['us'] / r['us']:.2f}x" if "us" in p else "n/a"
        print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]} | {'yes' if k[5] else 'no'} | {r['kernel']} | {r['us']:.1f} | "
              f"{r['tflops']:.0f} | {fl.get('tflops', 'n/a')} | {cu.get('tflops', 'n/a')} | {ratio(fl)} | {ratio(cu)} |")
        if r.get("graph_us", -1) > 0:
            graph_rows.append((k, r, fl, cu))
    if graph_rows:
        print()
        print("Short shapes, per call inside a CUDA graph of 20 calls (kernel time without launch/dispatch gaps):")
        print()
        print("| dtype | B,H,S,D | causal | flashcore us | flash us | cudnn us | vs flash | vs cudnn |")
        print("|---|---|---|---|---|---|---|---|")
        for k, r, fl, cu in graph_rows:
            def g(p):
                return p.get("graph_us", "n/a")
            def gr(p):
                return f"{p['graph_us'] / r['graph_us']:.2f}x" if "graph_us" in p else "n/a"
            print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]} | {'yes' if k[5] else 'no'} | {r['graph_us']:.1f} | {g(fl)} | {g(cu)} | {gr(fl)} | {gr(cu)} |")


if __name__ == "__main__":
    main()
