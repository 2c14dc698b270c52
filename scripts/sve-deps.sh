#!/usr/bin/env bash
# Installs what the Arm SVE cross build and its emulated tests need on Debian 12 (only the
# missing packages): the aarch64 GNU cross compiler (brings the target's libstdc++ and
# libgomp) and QEMU user-mode emulation (qemu-aarch64, SVE lengths up to 2048 bits).
# GoogleTest for the target is built from its sources in /usr/src/googletest (package
# googletest). FC_SVE_MCA=1 adds llvm (llvm-mca with the A64FX model, for
# tools/mca_report.py).
set -euo pipefail
pkgs=(g++-aarch64-linux-gnu qemu-user googletest)
[ "${FC_SVE_MCA:-0}" = 1 ] && pkgs+=(llvm)
"$(dirname "$0")/apt-install.sh" "${pkgs[@]}"
