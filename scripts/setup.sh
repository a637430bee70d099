#!/usr/bin/env bash
# Installs the Debian packages tripod needs (skipping those already present),
# then configures build/ and builds the `tripod` binary only (the tests,
# fuzz replays and benches are built by scripts/test.sh, or
# `cmake --build build`).
#
#   ./scripts/setup.sh            packages + release build
#   TRIPOD_SKIP_APT=1 ./scripts/setup.sh   build only
#   TRIPOD_CUDA=OFF ./scripts/setup.sh     CPU-only build even where nvcc exists
#   TRIPOD_CUDA=ON ./scripts/setup.sh      CUDA backend too, even without a visible GPU
#   (default: CUDA when nvcc is found and a GPU is visible)
set -euo pipefail
cd "$(dirname "$0")/.."

# Build and runtime dependencies, then the test oracles (PyTorch, node for
# the reference GPT-2 encoder, the KJV corpus, Slurm/MPI for launcher tests).
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev libgloo-dev libopenmpi-dev openmpi-bin slurm-wlm munge
  libsentencepiece-dev sentencepiece libicu-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  hwloc libhwloc-dev
  python3-torch python3-numpy
  bible-kjv-text bible-kjv
  nodejs npm
)

if [[ "${TRIPOD_SKIP_APT:-0}" != "1" ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  # node and npm may come from elsewhere than Debian; skip them when present.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
  fi
  read -ra missing <<<"${missing[*]}"
  if ((${#missing[@]})); then
    echo "[setup] installing: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "[setup] all Debian packages present"
  fi
fi

BUILD_TYPE="${TRIPOD_BUILD_TYPE:-Release}"
# The CUDA kernels take most of a first build on a small machine. Without a
# visible GPU they cannot run, so a first build skips them unless asked:
# TRIPOD_CUDA=ON (or AUTO: whenever nvcc is found, as CI does) builds them.
if [[ -z "${TRIPOD_CUDA:-}" ]]; then
  if command -v nvcc >/dev/null && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    TRIPOD_CUDA=OFF
    echo "[setup] nvcc found but no GPU visible: building the CPU version only" \
         "(TRIPOD_CUDA=ON ./scripts/setup.sh builds the CUDA backend too)"
  else
    TRIPOD_CUDA=AUTO
  fi
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DTRIPOD_CUDA="$TRIPOD_CUDA" ${TRIPOD_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)" --target tripod
echo "[setup] built build/tripod (the tests build with ./scripts/test.sh)"
