#!/usr/bin/env bash
# Installs what building and testing cusnap needs on a fresh Debian machine (apt-get), and
# checks that the CUDA driver API headers are present. Safe to run again: it installs only
# what is missing.
set -euo pipefail

packages=(g++ cmake make pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev binutils python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_include=""
for d in "${CUDA_HOME:-}/include" /usr/local/cuda/include /usr/local/cuda-13.0/include /usr/include; do
  if [[ -f "$d/cuda.h" ]]; then cuda_include="$d"; break; fi
done
if [[ -z "$cuda_include" ]]; then
  echo "bootstrap: cuda.h not found; install the CUDA toolkit headers or set CUDA_HOME" >&2
  exit 1
fi
echo "bootstrap: ready (CUDA headers in $cuda_include)"
