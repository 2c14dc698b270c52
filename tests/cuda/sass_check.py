#!/usr/bin/env python3
# Checks the SASS of the sm90 kernels (cuobjdump --dump-sass output on stdin or in a file)
# for what ptxas may silently undo:
#   - the main loop's wgmmas stay asynchronous: two WARPGROUP.DEPBARs per key tile (S_n
#     with wait 1, P V with wait 0), alternating, not one per wgmma (ptxas serializes
#     them, C7513); the loop may hold several key tiles (the speculative softmax's loop is
#     unrolled by two);
#   - every MUFU.EX2 of the loop sits between a tile's S wait and its P V wait (the next
#     wait after it, round the loop, is a P V wait), so the softmax overlaps P V (ptxas
#     hoisted a plain wait above it; see ptx::wgmma_wait_after);
#   - no local memory (spills) in the main loop (a few outside it, in the persistent
#     kernels' item loop, are reported but allowed).
# The main loop is the shortest conditional backward branch whose body holds MUFU and both
# GEMMs' wgmmas (the key-tile loop; the loops around it hold it and more; a drain or
# epilogue loop holds P V's only; the out-of-line retries of mbarrier waits jump back
# unconditionally and would span unrelated code).
# Prints one line per kernel; exit status 1 when any check fails or no kernel is found.
#
# Also reads nvdisasm's listing of a cubin (`nvdisasm -c x.cubin`, functions as
# `.text.<name>:` labels, branches to `.L_x_<n>` labels), so a kernel's main loop can be
# checked without a GPU: build one instance with `nvcc -cubin -gencode=arch=compute_90a,
# code=sm_90a` and run nvdisasm (the nvidia-cuda-nvdisasm wheel has it where the toolkit
# does not).
import re
import sys

# P V: A from registers (GMMA ... Rd, Ra, gdesc[..]); S = Q K^T from shared memory, or
# from registers too where Q is (the persistent fp8 kernels). A main loop holds both: GMMAs
# into two accumulators (S's and O's), P V's from registers.
rs = re.compile(r"GMMA\.\S+ R\d+, R\d+, gdesc\[")
dest = re.compile(r"GMMA\.\S+ (R\d+), ")


def from_nvdisasm(text):
    """nvdisasm's listing in cuobjdump's terms: `Function : <name>` headers and branch
    targets as addresses (a label's address is that of the instruction after it)."""
    lines, labels, pending = text.split("\n"), {}, []
    for ln in lines:
        m = re.match(r"^\s*(\.L_x_\d+):", ln)
        if m:
            pending.append(m.group(1))
            continue
        a = re.search(r"/\*([0-9a-f]{4,})\*/", ln)
        if a:
            for lab in pending:
                labels[lab] = a.group(1)
            pending = []
    out = []
    for ln in lines:
        m = re.match(r"^\.text\.(\S+):\s*$", ln)
        if m:
            out.append("\n\tFunction : " + m.group(1))
            continue
        out.append(re.sub(r"`\((\.L_x_\d+)\)", lambda x: "0x" + labels.get(x.group(1), "0"), ln))
    return "\n".join(out)


def functions(text):
    """(name, [(address, instruction)]) per function of a cuobjdump or nvdisasm listing."""
    if "Function : " not in text:
        text = from_nvdisasm(text)
    out = []
    for f in re.split(r"\n\s*Function : ", text)[1:]:
        name = f.split("\n", 1)[0].strip()
        out.append((name, [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", f)]))
    return out


def loops(ins):
    """The bodies of the conditional backward branches of a function, as instruction lists."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    for i, (a, t) in enumerate(ins):
        m = re.search(r"@!?U?P\d+\s+BRA\b.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            yield [x for _, x in ins[at[int(m.group(1), 16)]:i + 1]]


def main_loop(ins):
    """The sm90 kernel's key-tile loop (see above), or None."""
    loop = None
    for body in loops(ins):
        accs = {m.group(1) for x in body for m in [dest.search(x)] if m}
        hit = len(accs) >= 2 and any(rs.search(x) for x in body) and any("MUFU" in x for x in body)
        if hit and (loop is None or len(body) < len(loop)):
            loop = body
    return loop


def check(ins):
    """(main loop or None, reasons it fails, local-memory instructions of the function and
    of its main loop)."""
    loop = main_loop(ins)
    local = sum(bool(re.search(r"\b(LDL|STL)\b", t)) for _, t in ins)
    if loop is None:
        return None, ["no main loop with GMMA found"], local, 0
    depbars = [i for i, x in enumerate(loop) if "WARPGROUP.DEPBAR" in x]
    is0 = {i: bool(re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0", loop[i])) for i in depbars}
    mufu = [i for i, x in enumerate(loop) if "MUFU.EX2" in x]
    local_loop = sum(bool(re.search(r"\b(LDL|STL)\b", x)) for x in loop)
    why = []
    n = len(depbars)
    if n < 2 or n % 2 or any(is0[depbars[j]] == is0[depbars[(j + 1) % n]] for j in range(n)):
        why.append(f"{n} wgmma waits in the main loop (S and P V waits alternating expected: serialized wgmmas?)")
    # The first wait after each MUFU, round the loop, must be a P V wait.
    after = lambda m: next((d for d in depbars if d > m), depbars[0] if depbars else None)
    if not mufu or any(after(m) is None or not is0[after(m)] for m in mufu):
        why.append("a P V wait is above its softmax's MUFU.EX2 (no overlap)")
    if local_loop:
        why.append(f"{local_loop} local memory instructions in the main loop")
    return loop, why, local, local_loop


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    bad = found = 0
    for name, ins in functions(text):
        if "fwd_sm90_kernel" not in name:
            continue
        found += 1
        short = re.sub(r"^_ZN9flashcore4cuda15fwd_sm90_kernelI", "", name)[:60]
        loop, why, local, local_loop = check(ins)
        if loop is None:
            print(f"FAIL {short}: no main loop with GMMA found")
            bad += 1
            continue
        n = sum("WARPGROUP.DEPBAR" in x for x in loop)
        note = f", {local} local memory instructions outside it" if local and not local_loop else ""
        print(("FAIL " if why else "ok   ") + f"{short}: main loop {len(loop)} instructions, {n // 2} key tile(s)" + note + ("; " + "; ".join(why) if why else ""))
        bad += bool(why)
    if found == 0:
        print("FAIL: no fwd_sm90_kernel in the input")
    return 1 if bad or found == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
