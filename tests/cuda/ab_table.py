"""Old build against new: the table of a timing A/B (tests/cuda/ab_refactor.sh,
tests/cuda/robust_on_gpu.sh's ab stage). Reads flashcore_cuda_timing's JSON rows, each
tagged with "side" (old / new) and "round"; prints per row the kernel, old and new medians
over the rounds, the speed ratio old_us / new_us (> 1: new is faster) with its range over
the rounds, then the geometric mean and the rows below 0.98x.
    python3 tests/cuda/ab_table.py ROWS.jsonl
"""
import json, math, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if "us" not in j:
        continue
    key = (j["dtype"], j["D"], j["S"], j["causal"], j["B"], j["H"])
    rows.setdefault(key, {"old": [], "new": [], "kernel": {}})
    rows[key][j["side"]].append((j["round"], j["us"]))
    rows[key]["kernel"].setdefault(j["side"], set()).add(j["kernel"])
print("| dtype | D | S | causal | kernel | old us | new us | new speed / old | range over rounds |")
print("|---|---|---|---|---|---|---|---|---|")
ratios, low, bad_kernel = [], [], 0
for key in sorted(rows, key=lambda k: (k[0], k[1], k[3], k[2])):
    e = rows[key]
    if not e["old"] or not e["new"]:
        continue
    old = statistics.median(u for _, u in e["old"])
    new = statistics.median(u for _, u in e["new"])
    ratio = old / new
    per_round = [o / n for (ro, o) in e["old"] for (rn, n) in e["new"] if ro == rn]
    ko, kn = e["kernel"].get("old", set()), e["kernel"].get("new", set())
    same = ko == kn
    bad_kernel += not same
    kname = ",".join(sorted(kn)) if same else f"old {','.join(sorted(ko))} / new {','.join(sorted(kn))}"
    ratios.append(ratio)
    if ratio < 0.98:
        low.append((key, ratio))
    print(f"| {key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | {kname} | {old:.1f} | {new:.1f} | "
          f"{ratio:.3f} | {min(per_round):.3f}-{max(per_round):.3f} |")
if ratios:
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print(f"\n{len(ratios)} rows; geometric mean of new speed / old: {geo:.4f} (needs >= 0.995); "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}; rows below 0.98x: {len(low)}; rows whose kernel differs: {bad_kernel}")
    for key, ratio in low:
        print(f"  below 0.98x: {key}: {ratio:.3f}")
