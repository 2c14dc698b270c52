#!/usr/bin/env bash
# apt-install.sh PKG...: installs the Debian packages that are missing (apt-get update
# only when something is), as root or through sudo. Used by every *-deps script.
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "apt-install: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
