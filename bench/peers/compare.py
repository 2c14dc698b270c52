#!/usr/bin/env python3
"""Joins flashcore_cuda_timing and sdpa_peers.py JSON lines into a markdown table with
ratios (peer time / flashcore time: > 1.0 means flashcore is faster).

  python3 bench/peers/compare.py flashcore.jsonl peers.jsonl

With --all-tiles rows, the fastest kernel per shape is kept per family. When the rows hold
Hopper kernels (fwd_sm90_*), "ours" is the fastest sm90 kernel and the table adds the
fastest sm80-family kernel of the same run, the sm90/sm80 ratio and the kernel the
dispatcher picked (its "auto" row); otherwise "ours" is the fastest kernel overall.
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


def fastest(rows):
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r["us"] < best[k]["us"]:
            best[k] = r
    return best


def main():
    rows = [r for r in load(sys.argv[1]) if "us" in r]
    peers = {}
    for r in load(sys.argv[2]):
        if "backend" in r:
            peers[(key(r), r["backend"])] = r
    timed = [r for r in rows if not r.get("dispatcher")] or rows
    sm90 = fastest([r for r in timed if r["kernel"].startswith("fwd_sm90_")])
    sm80 = fastest([r for r in timed if not r["kernel"].startswith("fwd_sm90_")])
    picked = {key(r): r for r in rows if r.get("dispatcher")}
    # Ours: the sm90 kernel where one ran, else the fastest sm80-family kernel.
    best = dict(sm80)
    best.update(sm90)
    hopper = bool(sm90)
    names = []  # peer backends in the order they appear (flash, cudnn; efficient for f32)
    for (_, b) in peers:
        if b not in names:
            names.append(b)

    def ratio(num, den):
        return f"{num / den:.2f}x" if num and den else "n/a"

    extra_h = " sm80 kernel | sm80 TFLOP/s | sm90 vs sm80 |" if hopper else ""
    pick_h = " dispatcher picks |" if hopper and picked else ""
    print("| dtype | B,H,S,D | causal | flashcore kernel | us | TFLOP/s |" + extra_h + " "
          + " | ".join(f"{n} TFLOP/s" for n in names) + " | " + " | ".join(f"vs {n}" for n in names) + " |" + pick_h)
    ncols = 6 + (3 if hopper else 0) + 2 * len(names) + (1 if pick_h else 0)
    print("|" + "---|" * ncols)
    graph_rows = []
    for k, r in best.items():
        ps = [peers.get((k, n), {}) for n in names]
        extra = ""
        if hopper:
            o = sm80.get(k, {})
            extra = f" {o.get('kernel', 'n/a')} | {o.get('tflops', 'n/a')} | {ratio(o.get('us'), r['us'])} |"
        pick = f" {picked[k]['kernel']} |" if pick_h and k in picked else (" n/a |" if pick_h else "")
        print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]} | {'yes' if k[5] else 'no'} | {r['kernel']} | {r['us']:.1f} | "
              f"{r['tflops']:.0f} |{extra} " + " | ".join(str(p.get('tflops', 'n/a')) for p in ps) + " | "
              + " | ".join(ratio(p.get("us"), r["us"]) for p in ps) + " |" + pick)
        if r.get("graph_us", -1) > 0:
            graph_rows.append((k, r, ps))
    if graph_rows:
        print()
        print("Short shapes, per call inside a CUDA graph of 20 calls (kernel time without launch/dispatch gaps):")
        print()
        extra_h = " sm80 us |" if hopper else ""
        print("| dtype | B,H,S,D | causal | flashcore kernel | flashcore us |" + extra_h + " "
              + " | ".join(f"{n} us" for n in names) + " | " + " | ".join(f"vs {n}" for n in names) + " |")
        print("|" + "---|" * (5 + (1 if hopper else 0) + 2 * len(names)))
        for k, r, ps in graph_rows:
            extra = f" {sm80.get(k, {}).get('graph_us', 'n/a')} |" if hopper else ""
            print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]} | {'yes' if k[5] else 'no'} | {r['kernel']} | "
                  f"{r['graph_us']:.1f} |{extra} " + " | ".join(str(p.get("graph_us", "n/a")) for p in ps) + " | "
                  + " | ".join(ratio(p.get("graph_us"), r["graph_us"]) for p in ps) + " |")


if __name__ == "__main__":
    main()
