#!/usr/bin/env bash
# GPU peer: FlashAttention-3's Hopper forward (Dao-AILab/flash-attention, `hopper/`), built
# from its source at a pinned commit for the side-by-side runs of sdpa_interleaved.py (its
# `fa3` side). Nothing of it enters this repository: the sources go to a scratch folder
# that git ignores, the build happens there (or in /tmp on the device machine).
#
#   bench/peers/fa3.sh stage [DIR]   # here (network or mirrors): FA3's hopper/ at FA3_COMMIT,
#                                    # CUTLASS's include/ at the commit FA3 pins as its
#                                    # submodule, and the pinned build-helper wheels, into DIR
#                                    # (default .fa3, which .gitignore names)
#   bash DIR/fa3.sh build            # on the GPU machine (no network needed): builds the
#                                    # extension in /tmp/fa3 (a copy of DIR); prints its path
#   PYTHONPATH=/tmp/fa3/hopper python3 bench/peers/sdpa_interleaved.py ...
#
# The build keeps FA3's forward for f16, bf16 and e4m3 at head dims 128 and 256 only (its
# FLASH_ATTENTION_DISABLE_* switches: no backward, split, paged, append-KV, local, softcap,
# pack-GQA, varlen, cluster, other head dims or sm80): ~2 minutes on 16 cores.
#
# Environment:
#   FA3_GIT      git URL or local git dir of flash-attention  (default GitHub)
#   FA3_COMMIT   pinned commit (default 0251105a..., 2026-08-15)
#   CUTLASS_GIT  git URL or local git dir of CUTLASS          (default GitHub)
set -euo pipefail

FA3_GIT=${FA3_GIT:-https://github.com/Dao-AILab/flash-attention.git}
FA3_COMMIT=${FA3_COMMIT:-0251105a2fb19d2957484b7f023cd8c115286ced}
CUTLASS_GIT=${CUTLASS_GIT:-https://github.com/NVIDIA/cutlass.git}
WHEELS="ninja==1.11.1.4 wheel==0.45.1 packaging==24.2 einops==0.8.1"

TMP_CLONES=()
trap 'rm -rf "${TMP_CLONES[@]}"' EXIT
git_dir() {  # $1 URL or local git dir, $2 commit: a git dir holding the commit, printed
  local src=$1 commit=$2 tmp
  if git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null; then echo "$src"; return; fi
  tmp=$(mktemp -d)
  git clone -q --bare --filter=blob:none "$src" "$tmp"
  echo "$tmp"
}

stage() {
  local dir=${1:-.fa3} fa cut sub
  rm -rf "$dir" && mkdir -p "$dir/csrc/cutlass" "$dir/wheels"
  fa=$(git_dir "$FA3_GIT" "$FA3_COMMIT")
  [ "$fa" = "$FA3_GIT" ] || TMP_CLONES+=("$fa")  # a scratch clone: removed on exit
  git -C "$fa" archive "$FA3_COMMIT" hopper | tar -x -C "$dir"
  sub=$(git -C "$fa" ls-tree "$FA3_COMMIT" csrc/cutlass | awk '{print $3}')  # the submodule's pinned commit
  cut=$(git_dir "$CUTLASS_GIT" "$sub")
  [ "$cut" = "$CUTLASS_GIT" ] || TMP_CLONES+=("$cut")
  git -C "$cut" archive "$sub" include | tar -x -C "$dir/csrc/cutlass"
  echo "flash-attention $FA3_COMMIT hopper/, CUTLASS $sub include/ (scratch copy, not flashcore's)" > "$dir/README.md"
  pip download -q --no-deps -d "$dir/wheels" $WHEELS --platform manylinux2014_x86_64 --only-binary=:all: \
    --python-version 3.12
  cp "$0" "$dir/fa3.sh"
  du -sh "$dir"
}

build() {
  local src b
  src=$(cd "$(dirname "$0")" && pwd)
  b=/tmp/fa3
  rm -rf "$b" && mkdir -p "$b" && cp -r "$src"/. "$b"/
  python3 -c "import ninja, wheel, packaging, einops" 2>/dev/null || pip install -q --no-deps "$b"/wheels/*.whl
  export FLASH_ATTENTION_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=2
  for f in BACKWARD SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA VARLEN CLUSTER HDIM64 HDIM96 HDIM192 \
           HDIMDIFF64 HDIMDIFF192 SM80; do
    export FLASH_ATTENTION_DISABLE_$f=TRUE
  done
  (cd "$b/hopper" && python3 setup.py build_ext --inplace > "$b/build.log" 2>&1) || { tail -30 "$b/build.log"; exit 1; }
  ls "$b"/hopper/flash_attn_3/_C*.so
}

case "${1:-}" in
  stage) shift; stage "$@" ;;
  build) build ;;
  *) sed -n 2,22p "$0"; exit 2 ;;
esac
