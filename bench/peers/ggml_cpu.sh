#!/usr/bin/env bash
# CPU peer: ggml's FLASH_ATTN_EXT (the llama.cpp CPU flash-attention op), timed by its own
# `test-backend-ops perf -o FLASH_ATTN_EXT -b CPU`, on the issue's three shapes, optionally
# interleaved with flashcore-bench on the same shapes (this is how the side-by-side table in
# docs/results/cpu-x86-peers-*.md was made).
#
#   bench/peers/ggml_cpu.sh                      # fetch + build (once), then one ggml round
#   ROUNDS=5 FLASHCORE_BENCH=build-x/bench/flashcore-bench bench/peers/ggml_cpu.sh
#
# Nothing from ggml enters this repository: the source is cloned at a pinned commit into a
# scratch folder outside it, and the three perf cases that ggml's list lacks are added to
# that scratch copy only (a few printf'd lines inserted by this script).
#
# Environment:
#   GGML_GIT       git URL or local git dir      (default https://github.com/ggml-org/ggml.git)
#   GGML_COMMIT    pinned commit                 (default d99724f2..., as in BENCH.md)
#   GGML_DIR       scratch folder                (default /tmp/flashcore-peers/ggml)
#   THREADS        threads for both sides        (default 2; ggml's N_THREADS is set to it)
#   ROUNDS         rounds of (ggml, flashcore)   (default 1)
#   FLASHCORE_BENCH  path to flashcore-bench; when set, each round also runs it on the
#                  same shapes for every dtype in FC_DTYPES (default "f32 f16 bf16"; an entry
#                  "dtype:kernel" forces that kernel, e.g. f16:f16_12x2_noepi4_avx512fp16)
#   FC_ITERS       --iters for flashcore-bench and torch (default 5)
#   TORCH_PYTHON   a python with torch; when set, each round also times PyTorch's CPU
#                  scaled_dot_product_attention on the same shapes and FC_DTYPES
#   NICE           niceness for the timed runs   (default -5; ignored if not permitted)
#   LOG            raw log file                  (default $GGML_DIR/../ggml_cpu.log)
#
# Shapes (non-causal; ggml: f32 Q, f16 K/V, f32 O; GFLOP/s = 4*B*H*Sq*Sk*D / time):
#   d64   B1 H8  Hkv8 Sq512  Sk512   D64    (added; mask off)
#   d128  B1 H16 Hkv16 Sq2048 Sk2048 D128   (added; mask off)
#   d256  B1 H32 Hkv2 Sq512  Sk10000 D256   (added without mask; ggml's stock case, with its
#                                            random mask that is ~10% -inf, is run as d256m)
set -euo pipefail

GGML_GIT=${GGML_GIT:-https://github.com/ggml-org/ggml.git}
GGML_COMMIT=${GGML_COMMIT:-d99724f2b141fed9e1a9f402213506c081433465}
GGML_DIR=${GGML_DIR:-/tmp/flashcore-peers/ggml}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
FC_DTYPES=${FC_DTYPES:-"f32 f16 bf16"}
FC_ITERS=${FC_ITERS:-5}
NICE=${NICE:--5}
LOG=${LOG:-$(dirname "$GGML_DIR")/ggml_cpu.log}

repo_root=$(cd "$(dirname "$0")/../.." && pwd)
case "$(realpath -m "$GGML_DIR")/" in
  "$repo_root"/*) echo "ggml_cpu.sh: GGML_DIR must be outside the repository" >&2; exit 2 ;;
esac

# ---- fetch at the pinned commit -----------------------------------------------------
if [ ! -d "$GGML_DIR/.git" ]; then
  mkdir -p "$(dirname "$GGML_DIR")"
  git clone -q --no-checkout "$GGML_GIT" "$GGML_DIR"
fi
if ! git -C "$GGML_DIR" rev-parse -q --verify "$GGML_COMMIT^{commit}" >/dev/null; then
  git -C "$GGML_DIR" fetch -q origin "$GGML_COMMIT" 2>/dev/null || git -C "$GGML_DIR" fetch -q origin
fi
git -C "$GGML_DIR" checkout -q --force "$GGML_COMMIT"   # also undoes the last run's patch

# ---- patch the scratch copy: thread count and the added perf cases -------------------
tbo=$GGML_DIR/tests/test-backend-ops.cpp
grep -q '^#   define N_THREADS std::thread::hardware_concurrency()$' "$tbo" ||
  { echo "ggml_cpu.sh: N_THREADS line not found; pinned commit changed?" >&2; exit 1; }
sed -i "s|^#   define N_THREADS std::thread::hardware_concurrency()\$|#   define N_THREADS ${THREADS}|" "$tbo"
anchor='static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {'
grep -qF "$anchor" "$tbo" || { echo "ggml_cpu.sh: perf list not found" >&2; exit 1; }
# test_flash_attn_ext(hsk, hsv, nh_kv, {gqa, 1}, kv, n_queries, mask, sinks, max_bias,
#                     softcap, prec, type_K, type_V)
added=$(for c in "64, 64, 8, {1, 1}, 512, 512" "128, 128, 16, {1, 1}, 2048, 2048" \
                 "256, 256, 2, {16, 1}, 10000, 512"; do
  printf '    test_cases.emplace_back(new test_flash_attn_ext(%s, false, false, 0, 0, GGML_PREC_F32, GGML_TYPE_F16, GGML_TYPE_F16)); // flashcore peer\\n' "$c"
done)
sed -i "/^$(printf '%s' "$anchor" | sed 's/[][\\/.*^$]/\\&/g')\$/{n;s|\$|\\n${added}|}" "$tbo"
[ "$(grep -c '// flashcore peer$' "$tbo")" = 3 ] || { echo "ggml_cpu.sh: patch failed" >&2; exit 1; }

# ---- build test-backend-ops, CPU only, native ISA ------------------------------------
bld=$GGML_DIR/build-cpu
cmake -S "$GGML_DIR" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_CUDA=OFF -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF >/dev/null
ninja -C "$bld" test-backend-ops >/dev/null
tbo_bin=$bld/bin/test-backend-ops

# ---- run ----------------------------------------------------------------------------
nice_cmd=()
if nice -n "$NICE" true 2>/dev/null; then nice_cmd=(nice -n "$NICE"); fi
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}

# name  FLOPs  ggml params regex (matched against the case string)   flashcore shape flags
shapes=(
  "d64|$((4*8*512*512*64))|hsk=64,hsv=64,nh=8,nr23=\[1,1\],kv=512,nb=512,mask=0|--batch 1 --heads 8 --kv-heads 8 --seq-q 512 --seq-k 512 --head-dim 64"
  "d128|$((4*16*2048*2048*128))|hsk=128,hsv=128,nh=16,nr23=\[1,1\],kv=2048,nb=2048,mask=0|--batch 1 --heads 16 --kv-heads 16 --seq-q 2048 --seq-k 2048 --head-dim 128"
  "d256|$((4*32*512*10000*256))|hsk=256,hsv=256,nh=2,nr23=\[16,1\],kv=10000,nb=512,mask=0,sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K=f16|--batch 1 --heads 32 --kv-heads 2 --seq-q 512 --seq-k 10000 --head-dim 256"
  "d256m|$((4*32*512*10000*256))|hsk=256,hsv=256,nh=2,nr23=\[16,1\],kv=10000,nb=512,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K=f16|"
)

# PyTorch CPU scaled_dot_product_attention on the same shapes (TORCH_PYTHON=python with torch).
# K/V are expanded to H heads before timing (GQA by repeat); median of --iters calls after
# 2 warm-up calls; rel_err on head 0 against an fp64 softmax(QK^T/sqrt(D))V of the same inputs.
torch_sdpa='
import argparse, statistics, sys, time, torch, torch.nn.functional as F
a = argparse.ArgumentParser()
for f in ("batch", "heads", "kv-heads", "seq-q", "seq-k", "head-dim", "threads", "iters"):
    a.add_argument("--" + f, type=int)
a.add_argument("--dtypes")
o = a.parse_args()
torch.set_num_threads(o.threads)
B, H, Hkv, Sq, Sk, D = o.batch, o.heads, o.kv_heads, o.seq_q, o.seq_k, o.head_dim
T = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
for name in o.dtypes.split():
    dt = T[name]
    q = torch.randn(B, H, Sq, D).to(dt)
    k = torch.randn(B, Hkv, Sk, D).to(dt)
    v = torch.randn(B, Hkv, Sk, D).to(dt)
    ke, ve = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    be = torch._fused_sdp_choice(q, ke, ve)
    be = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}.get(be, str(be))
    for _ in range(2):
        out = F.scaled_dot_product_attention(q, ke, ve)
    ts = []
    for _ in range(o.iters):
        t = time.perf_counter(); out = F.scaled_dot_product_attention(q, ke, ve); ts.append(time.perf_counter() - t)
    g = 4 * B * H * Sq * Sk * D / statistics.median(ts) / 1e9
    q0, k0, v0 = q[0, 0].double(), k[0, 0].double(), v[0, 0].double()
    ref = torch.softmax(q0 @ k0.T / D ** 0.5, -1) @ v0
    err = ((out[0, 0].double() - ref).norm() / ref.norm()).item()
    print(name, "%.2f" % g, be, "%.1e" % err, flush=True)
'

echo "# ggml $(git -C "$GGML_DIR" rev-parse --short=8 HEAD), threads $THREADS, rounds $ROUNDS, $(date -u +%FT%TZ)" | tee -a "$LOG"
results=()   # "shape who dtype gflops"
for ((r = 1; r <= ROUNDS; r++)); do
  echo "# round $r: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
  for s in "${shapes[@]}"; do
    IFS='|' read -r name flop regex fcflags <<<"$s"
    out=$("${nice_cmd[@]}" "$tbo_bin" perf -o FLASH_ATTN_EXT -b CPU -p "$regex" 2>&1)
    echo "$out" >>"$LOG"
    lines=$(grep -F 'FLASH_ATTN_EXT(' <<<"$out" | grep -E 'GFLOPS' || true)
    [ "$(grep -c . <<<"$lines")" = 1 ] || { echo "ggml_cpu.sh: expected one perf line for $name:" >&2; echo "$out" | tail -5 >&2; exit 1; }
    # us/run -> GFLOP/s with ggml's own count (2*H*Sq*(Dk+Dv)*Sk = 4*B*H*Sq*Sk*D)
    us=$(sed -E 's/\x1b\[[0-9;]*m//g; s/.* ([0-9.]+) us\/run.*/\1/' <<<"$lines")
    g=$(awk -v f="$flop" -v us="$us" 'BEGIN{printf "%.2f", f / (us * 1e3)}')
    printf 'round %d  %-6s ggml       f16kv  %8.2f GFLOP/s\n' "$r" "$name" "$g" | tee -a "$LOG"
    results+=("$name ggml f16kv $g")
    if [ -n "${FLASHCORE_BENCH:-}" ] && [ -n "$fcflags" ]; then
      for entry in $FC_DTYPES; do
        dt=${entry%%:*}
        impl=()
        [ "$dt" != "$entry" ] && impl=(--impl "${entry#*:}")
        # shellcheck disable=SC2086
        j=$("${nice_cmd[@]}" "$FLASHCORE_BENCH" --op attention --backend cpu --dtype "$dt" "${impl[@]}" $fcflags \
              --threads "$THREADS" --iters "$FC_ITERS" --check --json 2>&1 | grep '^{' | tail -1)
        echo "$j" >>"$LOG"
        read -r g kern strat err ok <<<"$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["gflops"], d["kernel"], d["strategy"], "%.1e" % d["rel_err"], d["check_ok"])' "$j")"
        [ "$ok" = True ] || { echo "ggml_cpu.sh: flashcore $name $dt failed its check: $j" >&2; exit 1; }
        printf 'round %d  %-6s flashcore  %-5s  %8.2f GFLOP/s  (%s, %s, rel_err %s)\n' "$r" "$name" "$dt" "$g" "$kern" "$strat" "$err" | tee -a "$LOG"
        results+=("$name flashcore-$dt-$kern-$strat $dt $g")
      done
    fi
    if [ -n "${TORCH_PYTHON:-}" ] && [ -n "$fcflags" ]; then
      # shellcheck disable=SC2086
      while read -r dt g be err; do
        printf 'round %d  %-6s torch      %-5s  %8.2f GFLOP/s  (%s, rel_err %s)\n' "$r" "$name" "$dt" "$g" "$be" "$err" | tee -a "$LOG"
        results+=("$name torch-$dt-$be $dt $g")
      done < <("${nice_cmd[@]}" "$TORCH_PYTHON" -c "$torch_sdpa" $fcflags --threads "$THREADS" --iters "$FC_ITERS" --dtypes "$(for e in $FC_DTYPES; do echo "${e%%:*}"; done | awk '!seen[$0]++' | tr '\n' ' ')")
    fi
  done
done

# ---- medians over rounds ---------------------------------------------------------------
# x_ggml: ratio of the medians; per-round: median of (this / ggml) within each round, which
# survives the host's slow load drifts better.
echo "# medians over $ROUNDS round(s), GFLOP/s" | tee -a "$LOG"
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics, collections
v = collections.OrderedDict()
for line in sys.stdin:
    shape, who, dt, g = line.split()
    v.setdefault((shape, who), []).append(float(g))
ggml = {s: g for (s, w), g in v.items() if w == "ggml"}
for (s, w), g in v.items():
    m = statistics.median(g)
    ratio = ""
    if w != "ggml":
        per = statistics.median(a / b for a, b in zip(g, ggml[s]))
        ratio = "  x_ggml %.2f  per-round %.2f" % (m / statistics.median(ggml[s]), per)
    print("%-6s %-40s median %7.2f  min %7.2f  max %7.2f  n=%d%s" % (s, w, m, min(g), max(g), len(g), ratio))
' | tee -a "$LOG"
