#!/usr/bin/env bash
# Compares the generated code of CUDA instances between two configured builds (two source
# trees, e.g. before and after a refactor), without a GPU:
#   tests/cuda/sass_compare.sh BASE_BUILD NEW_BUILD key [key...]
# Each build's generated instance source (BUILD/src/cuda_inst/<key>.cu, so the key must be
# enabled in both: FLASHCORE_CUDA_DTYPES / _HDIMS / _ARCHS) is compiled to a cubin with the
# build's own flags (sm_90a for the sm90 family; the sm80 family for SM80_ARCH, default 90)
# plus -Xptxas=-v, listed with nvdisasm (NVDISASM=..., see sass_local.sh for the pinned
# wheel) and measured by sass_stats.py. Cubins and logs are kept in BUILD/sass_cmp/ and
# reused while newer than every file of that tree's src/cuda and the TU (FORCE=1 rebuilds).
# BASE_BUILD and NEW_BUILD may be the same build (its figures alone).
# Prints, per kernel function: total SASS instructions, the main loop's instructions (and
# whether the loop is the same code: "same" = identical text without addresses, "same ops" =
# the same opcode sequence (registers renamed), "reordered" = the same opcodes in another
# order, else how many opcodes are in one loop's mix and not the other's), registers, spill bytes, stack and sass_check's verdict, base -> new;
# then the compiler warnings that differ. Exit status 1 when a kernel is missing, a new
# kernel's sass_check fails, spills grew, or a main loop grew by more than MAX_LOOP_PCT (2).
set -eu
base=$1 new=$2
shift 2
ND=${NVDISASM:-$(command -v nvdisasm || true)}
[ -x "$ND" ] || { echo "sass_compare: no nvdisasm (set NVDISASM)"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

# measure BUILD KEY: BUILD/sass_cmp/KEY.jsonl
measure() {
  local b=$1 key=$2
  local src_dir out tu fam arch
  src_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$b/CMakeCache.txt")
  out=$b/sass_cmp
  tu=$b/src/cuda_inst/$key.cu
  mkdir -p "$out"
  [ -f "$tu" ] || { echo "sass_compare: no $tu (is $key enabled in $b?)" >&2; return 1; }
  if [ "${FORCE:-0}" = 1 ] || [ ! -f "$out/$key.jsonl" ] ||
     [ -n "$(find "$src_dir/src/cuda" "$tu" -newer "$out/$key.jsonl" -print -quit)" ]; then
    case $key in
      fwd_sm90_*) arch="-gencode=arch=compute_90a,code=sm_90a" ;;
      *) arch="-gencode=arch=compute_${SM80_ARCH:-90},code=sm_${SM80_ARCH:-90}" ;;
    esac
    nvcc -cubin $arch -O3 -DNDEBUG -std=c++17 -Xptxas=-v,-warn-spills -I"$src_dir/src" -I"$src_dir/include" \
      "$tu" -o "$out/$key.cubin" > "$out/$key.log" 2>&1 || { cat "$out/$key.log" >&2; return 1; }
    "$ND" -c "$out/$key.cubin" > "$out/$key.sass"
    python3 "$here/sass_stats.py" "$key" "$out/$key.sass" "$out/$key.log" > "$out/$key.jsonl"
  fi
}

# Both builds' keys, two compiles at a time (JOBS).
builds=("$base")
[ "$new" -ef "$base" ] || builds+=("$new")  # one build against itself: measured once
pids=()
for key in "$@"; do
  for b in "${builds[@]}"; do
    measure "$b" "$key" &
    pids+=($!)
    if [ ${#pids[@]} -ge "${JOBS:-2}" ]; then wait "${pids[0]}" || true; pids=("${pids[@]:1}"); fi
  done
done
for p in "${pids[@]}"; do wait "$p" || true; done

python3 - "$base" "$new" "${MAX_LOOP_PCT:-2}" "$@" <<'EOF'
import json, os, re, sys
base, new, max_pct, keys = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]

def rows(b, key):
    p = os.path.join(b, "sass_cmp", key + ".jsonl")
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else None

def short(name):
    # The kernel's distinguishing template argument: the fp8 chord form (last bool true).
    return "chord" if "Lb1EEEv" in name else "main"

bad = 0
print("| key | kernel | total | main loop | loop code | regs | spill st/ld | stack | sass_check |")
print("|---|---|---|---|---|---|---|---|---|")
for key in keys:
    rb, rn = rows(base, key), rows(new, key)
    if rb is None or rn is None:
        print(f"| {key} | (not built in {'base' if rb is None else 'new'}) | | | | | | | |")
        bad += 1
        continue
    if len(rb) != len(rn):
        print(f"| {key} | {len(rb)} kernels -> {len(rn)} | | | | | | | |")
        bad += 1
    for b, n in zip(sorted(rb, key=lambda r: short(r["function"])), sorted(rn, key=lambda r: short(r["function"]))):
        mb, mn = b.get("loop_mix", {}), n.get("loop_mix", {})
        moved = sum(abs(mb.get(k, 0) - mn.get(k, 0)) for k in set(mb) | set(mn))
        same = ("same" if b["loop_text"] == n["loop_text"] else "same ops" if b["loop_ops"] == n["loop_ops"]
                else "reordered" if moved == 0 else f"{moved} ops differ")
        pct = 100.0 * (n["loop"] - b["loop"]) / b["loop"] if b["loop"] else 0.0
        sb, sn = (b.get("spill_st", 0), b.get("spill_ld", 0)), (n.get("spill_st", 0), n.get("spill_ld", 0))
        f = lambda x, y: f"{x}" if x == y else f"{x} -> {y}"
        print(f"| {key} | {short(n['function'])} | {f(b['total'], n['total'])} | {f(b['loop'], n['loop'])}"
              + (f" ({pct:+.1f} %)" if b["loop"] != n["loop"] else "")
              + f" | {same} | {f(b.get('regs'), n.get('regs'))} | {f('%d/%d' % sb, '%d/%d' % sn)}"
              + f" | {f(b.get('stack'), n.get('stack'))} | {f(b['check'], n['check'])} |")
        if n["check"].startswith("FAIL") or sn[0] > sb[0] or pct > max_pct:
            bad += 1
    wb = set(rb[0]["warnings"]) if rb else set()
    wn = set(rn[0]["warnings"]) if rn else set()
    strip = lambda w: re.sub(r"^.*?(warning)", r"\1", w)  # paths and line numbers differ
    gone = {strip(w) for w in wb} - {strip(w) for w in wn}
    added = {strip(w) for w in wn} - {strip(w) for w in wb}
    for w in sorted(gone):
        print(f"  {key}: warning gone: {w}")
    for w in sorted(added):
        print(f"  {key}: warning new: {w}")
sys.exit(1 if bad else 0)
EOF
