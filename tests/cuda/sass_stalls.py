#!/usr/bin/env python3
"""Where a kernel's warps wait, per stretch of SASS: Nsight Compute's per-instruction stall
samples, and (optionally) the stall cycles ptxas encoded in each instruction.

    ncu --section SourceCounters -k regex:fwd_sm90 --launch-count 1 -o prof <app>
    ncu -i prof.ncu-rep --page source --csv --print-source sass > src.csv
    tests/cuda/sass_stalls.py src.csv [--hex listing.sass LO HI] [--top N]

Prints the stall reasons over the whole kernel, then the stretches of consecutive
instructions that ran equally often (a basic block or a run of them: the main loop's
softmax, its GEMM issue, an item's prologue, the producer's waits), each with its share of
the samples, its commonest opcodes and its top stall reasons, and the N instructions with
the most samples.

--hex: `nvdisasm -hex -c kernel.cubin` of the same kernel (addresses are offsets from the
kernel's start, as the CSV's once its first address is subtracted); for the instructions
in [LO, HI) (hex offsets) prints the control bits ptxas set (stall cycles S, yield Y, the
scoreboards it writes / waits on) beside the samples, and the sum of the stall cycles:
the fewest cycles one warp takes through that code. (2026-11-27, ccf9fac: the e4m3 softmax's 420
instructions carry 1067 stall cycles, FMNMX two each, MUFU.EX2 eight where the next one
follows.)
"""
import collections
import csv
import re
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    recs = []
    for r in rows[2:]:
        if len(r) < len(hdr) or not r[ix["Address"]].startswith("0x"):
            continue
        recs.append((int(r[ix["Address"]], 16), r[ix["Source"]].strip(),
                     int(r[ix["Warp Stall Sampling (All Samples)"]] or 0),
                     int(r[ix["Instructions Executed"]] or 0),
                     {h[6:]: int(r[ix[h]] or 0) for h in reasons}))
    base = recs[0][0]
    return [(a - base, s, n, ex, st) for a, s, n, ex, st in recs]


def opcode(src):
    parts = src.split()
    op = parts[1] if parts and parts[0].startswith("@") and len(parts) > 1 else (parts[0] if parts else "?")
    return op.split(".")[0]


def top(counter, k):
    return " ".join(f"{a}:{b}" for a, b in counter.most_common(k) if b)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    recs = load(argv[1])
    ntop = int(argv[argv.index("--top") + 1]) if "--top" in argv else 20
    total = sum(r[2] for r in recs) or 1
    whole = collections.Counter()
    for r in recs:
        whole.update(r[4])
    print(f"samples {total}: " + " ".join(f"{k} {100 * v / total:.1f}%" for k, v in whole.most_common(8)))
    print("\nstretches (consecutive instructions executed equally often), >= 0.3 % of the samples:")
    seg = []
    for a, src, n, ex, st in recs:
        if not seg or ex != seg[-1]["ex"]:
            seg.append({"a": a, "ex": ex, "n": 0, "k": 0, "ops": collections.Counter(), "st": collections.Counter()})
        s = seg[-1]
        s["n"] += n
        s["k"] += 1
        s["ops"][opcode(src)] += 1
        s["st"].update(st)
    for s in seg:
        if s["n"] >= 0.003 * total:
            print(f"  {s['a']:06x} {s['k']:4d} instr x{s['ex']:<8d} {100 * s['n'] / total:5.1f}% | {top(s['ops'], 6)} || {top(s['st'], 4)}")
    print(f"\ntop {ntop} instructions:")
    for a, src, n, ex, st in sorted(recs, key=lambda r: -r[2])[:ntop]:
        print(f"  {a:06x} {100 * n / total:5.2f}% x{ex:<8d} {src[:56]:56s} {top(collections.Counter(st), 3)}")
    if "--hex" in argv:
        i = argv.index("--hex")
        listing, lo, hi = argv[i + 1], int(argv[i + 2], 16), int(argv[i + 3], 16)
        samples = {a: (n, st) for a, _, n, _, st in recs}
        lines = open(listing).read().split("\n")
        cycles = count = 0
        print(f"\ncontrol bits in [{lo:x}, {hi:x}):")
        for j, ln in enumerate(lines[:-1]):
            m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);\s+/\* 0x[0-9a-f]{16} \*/", ln)
            m2 = re.search(r"/\* 0x([0-9a-f]{16}) \*/", lines[j + 1])
            if not m or not m2:
                continue
            a = int(m.group(1), 16)
            if not lo <= a < hi:
                continue
            ctrl = int(m2.group(1), 16) >> 41  # bits 105-127 of the instruction
            stall, yld, wb, rb, wait = ctrl & 15, (ctrl >> 4) & 1, (ctrl >> 5) & 7, (ctrl >> 8) & 7, (ctrl >> 11) & 63
            cycles += stall
            count += 1
            n, st = samples.get(a, (0, {}))
            sb = (f" wr{wb}" if wb != 7 else "") + (f" rd{rb}" if rb != 7 else "") + (f" wait{wait:02x}" if wait else "")
            print(f"  {a:06x} S{stall:<2d} Y{yld}{sb:14s} {m.group(2)[:52]:52s} {n:6d} {top(collections.Counter(st), 2)}")
        print(f"{count} instructions, {cycles} stall cycles (one warp's fewest cycles through them)")


if __name__ == "__main__":
    main(sys.argv)
