#!/usr/bin/env python3
"""Modeled A64FX throughput of the SVE GEMM micro-kernels' inner loops (llvm-mca).

For every kernel of src/cpu/ukernels/gemm_sve.inc this compiles its source file for
aarch64 to assembly (-S, with the flags src/cpu/sve/sources.cmake gives it), cuts the
kernel's k loop out of the assembly (the innermost loop that holds its FMLAs), runs
`llvm-mca -mtriple=aarch64 -mcpu=a64fx` on it, and prints:
  cycles per loop iteration, FMLAs per iteration, k steps per iteration,
  modeled % of FMA peak = (FMLAs / 2 pipes) / cycles,
beside the ideal of seed 000's hand analysis (every FMLA on one of A64FX's two FMA pipes:
FMLAs / 2 cycles, e.g. noepi4 12x2: 96 FMLA in 48 cycles per 4-k iteration).
Loops of a kernel that run besides the k loop (f16_12x2_sve's widening of A, once per k)
are modeled too and folded into an "all per-k work" percentage.

This is a model of the loop in steady state with every load hitting L1; it says nothing
about cache misses, call overhead or the C epilogue. Only Python 3 and the tools below.

Usage: tools/mca_report.py [--cxx aarch64-linux-gnu-g++] [--mca llvm-mca] [--markdown FILE]
                           [--show-asm KEY]
"""
import argparse
import datetime
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIST = ROOT / "src/cpu/ukernels/gemm_sve.inc"
SOURCES = ROOT / "src/cpu/sve/sources.cmake"
SVE_DIR = ROOT / "src/cpu/sve"
FMA_PIPES = 2  # A64FX: FLA and FLB both execute FMLA
FMLA = re.compile(r"^\s*(fmla|fmad)\s", re.I)
ENTRY = re.compile(r"^\s*FC_GEMM_UKERNEL\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,"
                   r"\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
# What the seeds say about each shape (hand analysis or measurement on A64FX hardware).
SEED_NOTES = {
    "f16_12x2_noepi4_sve": "seed 000: 96 FMLA / 48 cyc ideal; 85% measured (GEMM-only)",
    "f32_8x3_sve": "seed 001: ~90% in isolation, 85.9% in its pipeline",
    "f32_12x2_sve": "seed 000 fp32 baseline (no figure given)",
    "f32_6x4_sve": "seed 000 fp32_6x4_bcast (no figure given)",
    "f16_12x2_sve": "seed 000 swp family (fp32 C)",
}


def kernels():
    out = []
    for line in LIST.read_text().splitlines():
        m = ENTRY.match(line)
        if m:
            key, _isa, ab, acc, mr, nr, ka = m.groups()
            out.append(dict(key=key, ab=ab, acc=acc, mr=int(mr), nr=int(nr), k_align=int(ka)))
    return out


def flags_of(src_name):
    """The per-file flags that sources.cmake gives src_name (kept in one place)."""
    text = SOURCES.read_text()
    sets = dict(re.findall(r"set\((_fc_\w+)\s+([^)]*)\)", text))
    for block in re.findall(r"set_source_files_properties\(([^)]*)\)", text, re.S):
        if src_name in block:
            var = re.search(r"\$\{(_fc_\w+)\}", block).group(1)
            return sets[var].split()
    raise SystemExit(f"mca_report: no flags for {src_name} in {SOURCES}")


def source_of(key):
    for path in sorted(SVE_DIR.glob("*.cpp")):
        if re.search(rf"\bvoid {key}\(", path.read_text()):
            return path
    raise SystemExit(f"mca_report: no definition of {key} in {SVE_DIR}")


def compile_asm(cxx, src, extra=()):
    cmd = [cxx, "-std=c++20", "-O3", "-DFC_BUILD_SVE", f"-I{ROOT/'src'}", f"-I{ROOT/'include'}",
           *flags_of(src.name), *extra, "-S", "-o", "-", str(src)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout, cmd


def function_body(asm, key):
    lines = asm.splitlines()
    start = next((i for i, l in enumerate(lines)
                  if re.match(rf"^_ZN\w*{len(key)}{key}E\w*:", l)), None)
    if start is None:
        raise SystemExit(f"mca_report: {key} not found in the assembly")
    end = next(i for i in range(start, len(lines)) if ".cfi_endproc" in lines[i] or
               lines[i].startswith("\t.size"))
    return lines[start:end]


CONDS = ("eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al|nv|none|any|nlast|last|first|"
         "nfrst|pmore|plast|tcont|tstop")
BRANCH = re.compile(rf"^\s*(b\.?(?:{CONDS})|b|cbnz|cbz|tbnz|tbz)\s+(?:\w+,\s*)*(?:#\d+,\s*)?"
                    r"(\.L\w+)\s*$")


def instructions(block):
    return [l for l in block if l.strip() and not l.strip().startswith((".", "//"))
            and not re.match(r"^\S+:", l)]


def loops(body):
    """Innermost-first list of (label index, branch index) for backward branches."""
    labels = {re.match(r"^(\.L\w+):", l).group(1): i for i, l in enumerate(body)
              if re.match(r"^\.L\w+:", l)}
    found = []
    for j, l in enumerate(body):
        m = BRANCH.match(l)
        if m and m.group(2) in labels and labels[m.group(2)] < j:
            found.append((labels[m.group(2)], j))
    return sorted(found, key=lambda x: x[1] - x[0])


def innermost(found):
    """Loops that contain no other loop."""
    return [(a, b) for (a, b) in found
            if not any((a2, b2) != (a, b) and a <= a2 and b2 <= b for (a2, b2) in found)]


def run_mca(mca, insns, iterations=300):
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(insns) + "\n")
        path = f.name
    out = subprocess.run([mca, "-mtriple=aarch64", "-mcpu=a64fx", f"-iterations={iterations}", path],
                         check=True, capture_output=True, text=True).stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1))
    rthr = float(re.search(r"Block RThroughput:\s+([\d.]+)", out).group(1))
    pathlib.Path(path).unlink()
    return cycles / iterations, rthr


def analyse(k, cxx, mca, extra=()):
    src = source_of(k["key"])
    asm, cmd = compile_asm(cxx, src, extra)
    body = function_body(asm, k["key"])
    inner = innermost(loops(body))
    kloops = [(a, b) for (a, b) in inner if any(FMLA.match(l) for l in body[a:b + 1])]
    if not kloops:
        raise SystemExit(f"mca_report: no FMLA loop in {k['key']}")
    a, b = max(kloops, key=lambda x: sum(1 for l in body[x[0]:x[1] + 1] if FMLA.match(l)))
    kloop = instructions(body[a:b + 1])
    fmla = sum(1 for l in kloop if FMLA.match(l))
    nvec = k["nr"] // (16 if k["acc"] == "f32" else 32)  # vectors per C row at 512 bits
    ksteps = fmla / (k["mr"] * nvec)
    cyc, rthr = run_mca(mca, kloop)
    r = dict(key=k["key"], insns=len(kloop), fmla=fmla, ksteps=ksteps, cycles=cyc, rthr=rthr,
             ideal=fmla / FMA_PIPES, pct=100.0 * fmla / FMA_PIPES / cyc, loads=sum(
                 1 for l in kloop if re.match(r"^\s*ld1", l)), asm=kloop, cmd=cmd,
             extra_per_k=0.0)
    # Other innermost loops of the kernel that run once per k (A widening): per-k cost.
    for (a2, b2) in inner:
        if (a2, b2) == (a, b):
            continue
        ins = instructions(body[a2:b2 + 1])
        if (any(re.match(r"^\s*fcvt\s", l) for l in ins) and not any(FMLA.match(l) for l in ins)
                and any(re.match(r"^\s*st1", l) for l in ins)):
            c2, _ = run_mca(mca, ins)
            r["extra_per_k"] += c2
    per_k = cyc / ksteps + r["extra_per_k"]
    r["pct_all"] = 100.0 * (fmla / ksteps) / FMA_PIPES / per_k
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cxx", default="aarch64-linux-gnu-g++")
    ap.add_argument("--mca", default="llvm-mca")
    ap.add_argument("--markdown", help="also write the table and the loops to this file")
    ap.add_argument("--show-asm", help="print the k loop of this kernel")
    ap.add_argument("--only", help="only this kernel")
    ap.add_argument("--extra-flags", default="", help="compiler flags to try on top (experiments)")
    args = ap.parse_args()

    rows = [analyse(k, args.cxx, args.mca, args.extra_flags.split()) for k in kernels()
            if args.only in (None, k["key"])]
    head = ("| kernel | k steps / iter | FMLA / iter | loads / iter | insns / iter | "
            "ideal cyc (FMLA/2) | modeled cyc / iter | modeled % FMA peak (k loop) | "
            "incl. per-k extras | seed |")
    sep = "|" + "---|" * 10
    table = [head, sep]
    for r in rows:
        extra = f"{r['pct_all']:.1f}%" if r["extra_per_k"] else "-"
        if r["extra_per_k"]:
            extra += f" (+{r['extra_per_k']:.2f} cyc/k)"
        table.append(f"| `{r['key']}` | {r['ksteps']:g} | {r['fmla']} | {r['loads']} | {r['insns']} | "
                     f"{r['ideal']:g} | {r['cycles']:.2f} | {r['pct']:.1f}% | {extra} | "
                     f"{SEED_NOTES.get(r['key'], '')} |")
    print("\n".join(table))
    if args.show_asm:
        r = next(r for r in rows if r["key"] == args.show_asm)
        print("\n".join(r["asm"]))
    if args.markdown:
        cxx_ver = subprocess.run([args.cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        mca_ver = next((l.strip() for l in subprocess.run([args.mca, "--version"], capture_output=True,
                        text=True).stdout.splitlines() if "version" in l), "?")
        doc = [f"# SVE micro-kernels: llvm-mca model of the k loops on A64FX ({datetime.date.today()})", "",
               "Produced by `tools/mca_report.py --markdown <this file>` (no A64FX here: these are",
               "modeled figures, not measurements).", "",
               f"- compiler: `{cxx_ver}`, `-std=c++20 -O3` and the per-file flags of "
               f"`src/cpu/sve/sources.cmake` (`{' '.join(flags_of('gemm_f16_sve.cpp'))}` for the fp16 file)",
               f"- model: `llvm-mca -mtriple=aarch64 -mcpu=a64fx -iterations=300` ({mca_ver})",
               "- ideal = FMLAs / 2 (two FMA pipes), the rule of seed 000's hand analysis",
               "- % FMA peak = ideal / modeled cycles; 'incl. per-k extras' adds loops that run",
               "  once per k beside the k loop (f16_12x2_sve widens A to fp32 that way)", "",
               *table, ""]
        for r in rows:
            doc += [f"## `{r['key']}` k loop", "", "```asm", *[l.rstrip() for l in r["asm"]], "```", ""]
        pathlib.Path(args.markdown).write_text("\n".join(doc))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
