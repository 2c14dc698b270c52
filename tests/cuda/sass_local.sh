#!/usr/bin/env bash
# The sm90 main-loop checks of tests/cuda/sass_check.py without a GPU, for some instances of a
# configured CUDA build: each generated instance source is compiled to a cubin for sm_90a and
# listed with nvdisasm (the toolkit's, or NVDISASM=...; the pinned wheel has one:
#   pip download --no-deps nvidia-cuda-nvdisasm==13.5.37 -d /tmp/nvd && unzip -q -o /tmp/nvd/*.whl -d /tmp/nvd/x
#   NVDISASM=/tmp/nvd/x/nvidia/cu13/bin/nvdisasm).
#   tests/cuda/sass_local.sh build/cuda fwd_sm90_f16_hd256_128x64_s2_p [more keys]
set -eu
B=$1
shift
ND=${NVDISASM:-$(command -v nvdisasm || true)}
[ -x "$ND" ] || { echo "sass_local: no nvdisasm (set NVDISASM)"; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
rc=0
for key in "$@"; do
  src="$B/src/cuda_inst/$key.cu"
  [ -f "$src" ] || { echo "sass_local: no $src (is $key enabled in this build?)"; rc=1; continue; }
  nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isrc -Iinclude "$src" -o "$T/$key.cubin"
  "$ND" -c "$T/$key.cubin" | python3 "$(dirname "$0")/sass_check.py" || rc=1
done
exit $rc
