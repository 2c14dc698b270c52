"""The table of a timing A/B between builds (tests/cuda/ab_trees.sh, tests/cuda/robust_on_gpu.sh's
ab stage). Reads flashcore_cuda_timing's JSON rows, each tagged first with "side" (the
build's name) and "round" (the tool's own "round" key, written last, is not the A/B's);
for each pair BASE/OTHER (default old/new) prints per row the kernel, the medians over the
rounds, the speed ratio base_us / other_us (> 1: OTHER is faster) with its range over the
rounds, then the geometric mean (all rows, S <= 1024, S >= 2048) and the rows below 0.98x.
    python3 tests/cuda/ab_table.py ROWS.jsonl [BASE/OTHER ...]
"""
import json, math, statistics, sys


def first_keys(pairs):
    """A JSON object whose repeated keys keep their first value."""
    obj = {}
    for k, v in pairs:
        obj.setdefault(k, v)
    return obj


def load(path):
    rows = {}  # key -> side -> {"us": {round: us}, "kernel": set}
    for line in open(path):
        try:
            j = json.loads(line, object_pairs_hook=first_keys)
        except ValueError:
            continue
        if "us" not in j or "side" not in j:
            continue
        key = (j["dtype"], j["D"], j["S"], j["causal"], j["B"], j["H"])
        e = rows.setdefault(key, {}).setdefault(j["side"], {"us": {}, "kernel": set()})
        e["us"].setdefault(j.get("round", 0), []).append(j["us"])
        e["kernel"].add(j["kernel"])
    return rows


def geo(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def table(rows, base, other):
    print(f"\n## {other} against {base}\n")
    print(f"| dtype | D | S | causal | kernel | {base} us | {other} us | speed ratio | range over rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios, short, long_, low, bad_kernel = [], [], [], [], 0
    for key in sorted(rows, key=lambda k: (k[0], k[1], k[3], k[2])):
        e = rows[key]
        if base not in e or other not in e:
            continue
        a, b = e[base], e[other]
        ua = statistics.median(u for us in a["us"].values() for u in us)
        ub = statistics.median(u for us in b["us"].values() for u in us)
        ratio = ua / ub
        per_round = [statistics.median(a["us"][r]) / statistics.median(b["us"][r]) for r in a["us"] if r in b["us"]]
        same = a["kernel"] == b["kernel"]
        bad_kernel += not same
        kname = ",".join(sorted(b["kernel"])) if same else \
            f"{base} {','.join(sorted(a['kernel']))} / {other} {','.join(sorted(b['kernel']))}"
        ratios.append(ratio)
        (short if key[2] <= 1024 else long_).append(ratio)
        if ratio < 0.98:
            low.append((key, ratio))
        print(f"| {key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | {kname} | {ua:.1f} | {ub:.1f} | "
              f"{ratio:.3f} | {min(per_round):.3f}-{max(per_round):.3f} |")
    if not ratios:
        print("no rows in common")
        return
    print(f"\n{len(ratios)} rows; geometric mean of {other}'s speed / {base}'s: {geo(ratios):.4f} "
          f"(S <= 1024: {geo(short):.4f}, S >= 2048: {geo(long_):.4f}); min {min(ratios):.3f}, "
          f"max {max(ratios):.3f}; rows below 0.98x: {len(low)}; rows whose kernel differs: {bad_kernel}")
    for key, ratio in low:
        print(f"  below 0.98x: {key}: {ratio:.3f}")


def main():
    rows = load(sys.argv[1])
    for pair in sys.argv[2:] or ["old/new"]:
        base, other = pair.split("/")
        table(rows, base, other)


if __name__ == "__main__":
    main()
