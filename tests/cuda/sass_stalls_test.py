#!/usr/bin/env python3
# Self-test of tests/cuda/sass_stalls.py on a synthetic Nsight Compute source CSV and
# nvdisasm -hex listing: the stretches (equal execution counts), the samples' shares and
# the control bits' stall cycles it must report. Runs on any machine (ctest).
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sass_stalls.py")
REASONS = ["stall_barrier", "stall_wait", "stall_selected"]
HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"] + REASONS
# (address, source, samples, executed, barrier, wait, selected, stall cycles in the listing)
INS = [
    (0x7F0000000000, "MOV R1, c[0x0][0x28]", 2, 10, 0, 1, 1, 1),
    (0x7F0000000010, "FMNMX R2, R3, R4, !PT", 30, 500, 0, 20, 10, 2),
    (0x7F0000000020, "MUFU.EX2 R2, R2", 60, 500, 0, 50, 10, 8),
    (0x7F0000000030, "FADD R5, R5, R2", 8, 500, 0, 4, 4, 3),
    (0x7F0000000040, "BAR.SYNC.DEFER_BLOCKING 0x0", 100, 10, 95, 0, 5, 1),
]


def main():
    with tempfile.TemporaryDirectory() as d:
        csv_path, hex_path = os.path.join(d, "src.csv"), os.path.join(d, "k.sass")
        with open(csv_path, "w") as f:
            f.write('"Kernel Name","k"\n' + ",".join(f'"{h}"' for h in HDR) + "\n")
            for a, src, n, ex, b, w, s, _ in INS:
                f.write(f'"0x{a:x}","{src}","{n}","{ex}","{b}","{w}","{s}"\n')
        with open(hex_path, "w") as f:
            for a, src, *_, stall in INS:
                off = a - INS[0][0]
                f.write(f"        /*{off:04x}*/                   {src} ;   /* 0x000000000000a000 */\n")
                f.write(f"                                                  /* 0x{(stall << 41) | (7 << 46) | (7 << 49):016x} */\n")
        out = subprocess.run([sys.executable, TOOL, csv_path, "--top", "2", "--hex", hex_path, "10", "40"],
                             capture_output=True, text=True)
    print(out.stdout, out.stderr)
    expect = [
        "samples 200: barrier 47.5% wait 37.5% selected 15.0%",
        "000010    3 instr x500       49.0% | FMNMX:1 MUFU:1 FADD:1",
        "000040    1 instr x10        50.0% | BAR:1",
        "3 instructions, 13 stall cycles",
    ]
    bad = [e for e in expect if e not in out.stdout]
    if out.returncode != 0 or bad:
        print("missing:", bad)
        return 1
    print("sass_stalls selftest ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
