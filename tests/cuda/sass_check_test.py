#!/usr/bin/env python3
# Self-test of tests/cuda/sass_check.py on synthetic SASS (cuobjdump's format): main loops it
# must accept (one key tile, two unrolled tiles, a retry stub that jumps back, spills outside
# the loop) and ones it must reject (serialized wgmmas, P V's wait above the softmax, a
# spill in the loop). Runs on any machine (ctest); the real SASS is checked on the device.
import os
import subprocess
import sys

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sass_check.py")
SS = "HGMMA.64x128x16.F32 R24, gdesc[UR20], RZ, !UPT"
RS = "HGMMA.64x128x16.F32 R88, R180, gdesc[UR16].tnspB, R88"
RS_S = "QGMMA.64x128x32.F32.E4M3.E4M3 R24, R176, gdesc[UR8], RZ, !UPT"  # S with Q in registers
W1, W0 = "WARPGROUP.DEPBAR.LE gsb0, 0x1", "WARPGROUP.DEPBAR.LE gsb0, 0x0"
MUFU = "MUFU.EX2 R12, R12"


def function(body, name="_ZN9flashcore4cuda15fwd_sm90_kernelI6__halfLi128ELi128ELi128ELi2ELi0EEEv"):
    """body: instructions; 'LOOP' marks the loop head, 'BACK' a conditional branch to it;
    'TAIL' marks a later point and 'STUB' branches back to it unconditionally (an mbarrier
    retry stub's jump back into the code after the loop)."""
    head = tail = None
    lines = []
    for i, ins in enumerate(["MOV R1, c[0x0][0x28]"] + body + ["EXIT"]):
        addr = 0x10 * i
        if ins in ("LOOP", "TAIL"):
            head, tail = (addr, tail) if ins == "LOOP" else (head, addr)
            ins = "NOP"
        elif ins == "BACK":
            ins = f"@!P0 BRA 0x{head:x}"
        elif ins == "STUB":
            ins = f"BRA 0x{tail:x}"
        lines.append(f"        /*{addr:04x}*/                   {ins} ;")
    return f"\n\tFunction : {name}\n" + "\n".join(lines) + "\n"


def tile():
    return [SS, SS, RS, RS, "BAR.ARV R13, 0x100", W1, MUFU, MUFU, "FADD R1, R2, R3", W0, "FMUL R4, R4, R5"]


def run(text):
    r = subprocess.run([sys.executable, CHECK], input=text, capture_output=True, text=True)
    return r.returncode, r.stdout


cases = [
    ("one key tile", ["LOOP"] + tile() + ["BACK"], 0),
    ("two unrolled key tiles", ["LOOP"] + tile() + tile() + ["BACK"], 0),
    ("Q in registers (S an RS wgmma too)", ["LOOP"] + [RS_S if x == SS else x for x in tile()] + ["BACK"], 0),
    ("P V alone, no S GEMM in the loop", ["LOOP"] + [x for x in tile() if x != SS] + ["BACK"], 1),
    # The stub's span (the drain: S, P V and a wait) is shorter than the loop but is no loop.
    ("retry stub after the loop", ["LOOP"] + tile() + tile() + ["BACK", "TAIL", SS, RS, MUFU, W0, "STUB"], 0),
    ("spill outside the loop", ["STL [R1], R2"] + ["LOOP"] + tile() + ["BACK", "LDL R2, [R1]"], 0),
    ("serialized wgmmas", ["LOOP", SS, W0, SS, W0, RS, W0, W1, MUFU, W0, "BACK"], 1),
    ("P V wait above the softmax", ["LOOP", SS, RS, W1, W0, MUFU, "BACK"], 1),
    ("spill in the loop", ["LOOP"] + tile()[:7] + ["STL [R1], R2"] + tile()[7:] + ["BACK"], 1),
    ("no loop", tile(), 1),
]
bad = 0
for name, body, want in cases:
    rc, out = run(function(body))
    ok = rc == want
    bad += not ok
    print(("ok   " if ok else "FAIL ") + f"{name}: rc {rc} (want {want}): {out.strip()}")


def nvdisasm(body, name="_ZN9flashcore4cuda15fwd_sm90_kernelI6__halfLi64ELi64ELi64ELi2ELi1EEEv"):
    """The same function as nvdisasm lists it: a .text label, branches to .L_x labels."""
    lines = [f"\t.section\t.text.{name},\"ax\",@progbits", f".text.{name}:"]
    for i, ins in enumerate(["MOV R1, c[0x0][0x28]"] + body + ["EXIT"]):
        if ins == "LOOP":
            lines.append(".L_x_7:")
            ins = "NOP"
        elif ins == "BACK":
            ins = "@!P0 BRA `(.L_x_7)"
        lines.append(f"        /*{0x10 * i:04x}*/                   {ins} ;")
    return "\n".join(lines) + "\n"


for name, body, want in [("nvdisasm listing", ["LOOP"] + tile() + ["BACK"], 0),
                         ("nvdisasm listing, spill in the loop", ["LOOP"] + tile()[:7] + ["STL [R1], R2"] + tile()[7:] + ["BACK"], 1)]:
    rc, out = run(nvdisasm(body))
    bad += rc != want
    print(("ok   " if rc == want else "FAIL ") + f"{name}: rc {rc} (want {want}): {out.strip()}")
rc, out = run("no functions here\n")
bad += rc != 1
print(("ok   " if rc == 1 else "FAIL ") + f"empty input: rc {rc} (want 1)")
sys.exit(1 if bad else 0)
