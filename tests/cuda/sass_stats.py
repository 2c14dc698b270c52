#!/usr/bin/env python3
# Per-kernel figures of one compiled instance, for comparing two builds (sass_compare.sh):
#   sass_stats.py KEY LISTING PTXAS_LOG  ->  one JSON line per kernel function
# LISTING: nvdisasm -c (or cuobjdump --dump-sass) of the instance's cubin; PTXAS_LOG: the
# compiler's output with -Xptxas=-v (registers, stack, spills per function) and its warnings.
# Figures: total SASS instructions, the main loop's instructions (sm90: sass_check.py's key-tile
# loop, with its verdict; sm80: the shortest conditional backward branch whose body holds
# both the MMAs and MUFU.EX2, i.e. the key loop), two fingerprints of that loop (its opcode
# sequence, and its full text without addresses and branch targets: equal fingerprints mean
# the same loop) and its opcode mix (counts per opcode), registers, spill bytes, stack frame, and the compiler warnings of the TU.
import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_check  # noqa: E402


def ptxas_info(log):
    """{mangled name: {regs, spill_st, spill_ld, stack}} from ptxas -v, and the warnings."""
    info, cur = {}, None
    for ln in log.split("\n"):
        m = re.search(r"Function properties for (\S+)", ln)
        if m:
            cur = info.setdefault(m.group(1), {})
            continue
        m = re.search(r"Compiling entry function '(\S+)'", ln)
        if m:
            cur = info.setdefault(m.group(1), {})
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", ln)
        if m and cur is not None:
            cur.update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", ln)
        if m and cur is not None:
            cur["regs"] = int(m.group(1))
    warnings = sorted({ln.strip() for ln in log.split("\n") if re.search(r"warning", ln, re.I)})
    return info, warnings


def strip(t):
    """An instruction without its address-dependent parts (branch targets)."""
    return re.sub(r"0x[0-9a-f]+", "0x?", t) if re.search(r"\b(BRA|BSSY|CALL|JMP|BRX)\b", t) else t


def digest(lines):
    return hashlib.sha1("\n".join(lines).encode()).hexdigest()[:12]


def sm80_loop(ins):
    loop = None
    for body in sass_check.loops(ins):
        if any("HMMA" in x for x in body) and any("MUFU.EX2" in x for x in body):
            if loop is None or len(body) < len(loop):
                loop = body
    return loop


def main():
    key, listing, log = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
    info, warnings = ptxas_info(log)
    for name, ins in sass_check.functions(listing):
        if "_kernel" not in name:
            continue
        row = {"key": key, "function": name, "total": len(ins)}
        if "fwd_sm90_kernel" in name:
            loop, why, local, local_loop = sass_check.check(ins)
            row["check"] = "ok" if not why else "FAIL: " + "; ".join(why)
        else:
            loop = sm80_loop(ins)
            row["check"] = "-"
        row["loop"] = len(loop) if loop else 0
        row["loop_ops"] = digest([x.split()[0] if not x.startswith("@") else " ".join(x.split()[:2]) for x in loop]) if loop else ""
        row["loop_text"] = digest([strip(x) for x in loop]) if loop else ""
        # The loop's opcodes (with predicate and modifiers, without operands) and their counts:
        # equal mixes in another order are a reordering or a renaming of registers.
        mix = {}
        for x in loop or []:
            op = " ".join(x.split()[:2]) if x.startswith("@") else x.split()[0]
            mix[re.sub(r"^@!?U?P\w+ ", "@P ", op)] = mix.get(re.sub(r"^@!?U?P\w+ ", "@P ", op), 0) + 1
        row["loop_mix"] = mix
        row["local"] = sum(bool(re.search(r"\b(LDL|STL)\b", t)) for _, t in ins)
        row.update(info.get(name, {}))
        row["warnings"] = warnings
        print(json.dumps(row))


if __name__ == "__main__":
    main()
