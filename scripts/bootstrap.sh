#!/usr/bin/env bash
# Installs what building and testing cusnap needs on a fresh Debian machine (apt-get), and
# checks that the CUDA driver API headers are present. Safe to run again: it installs only
# what is missing.
set -euo pipefail

packages=(g++ cmake make pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev libssl-dev libxxhash-dev binutils python3 clang
          zsh fish groff-base)  # clang: libFuzzer (scripts/fuzz.sh); zsh, fish, groff: the generated
          # completions and man page are parsed by their own tools (tests/integration/cli_docs_check.sh)
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
# cusnap compiles against the CUDA driver API headers (the checkpoint API's structures,
# CUcheckpointGpuPair included, and the entry-point versions of cuda.h) but never links
# libcuda or libcudart; 13.0 is the version it is built and tested with.
min_cuda=13000
cuda_help="cusnap needs cuda.h of CUDA 13.0 or newer (only the header: nothing is linked).
  Debian 12, from NVIDIA's CUDA apt repository for debian12/x86_64 (NVIDIA's CUDA installation
  guide names it; install its cuda-keyring package first):  apt-get install cuda-driver-dev-13-0 cuda-cudart-dev-13-0
  (cuda.h lands in /usr/local/cuda-13.0/include), or point CUDA_HOME at a CUDA toolkit 13.x."
if [[ -z "$cuda_include" ]]; then
  echo "bootstrap: cuda.h not found (looked in \$CUDA_HOME/include, /usr/local/cuda/include, /usr/local/cuda-13.0/include, /usr/include)" >&2
  echo "$cuda_help" >&2
  exit 1
fi
cuda_version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda_include/cuda.h" | head -1)
if [[ -z $cuda_version || $cuda_version -lt $min_cuda ]]; then
  echo "bootstrap: $cuda_include/cuda.h is CUDA_VERSION ${cuda_version:-unknown}, older than $min_cuda" >&2
  echo "$cuda_help" >&2
  exit 1
fi
echo "bootstrap: ready (CUDA headers in $cuda_include, CUDA_VERSION $cuda_version)"
