#!/usr/bin/env bash
# Sets up if needed, builds everything (setup.sh builds only the tripod
# binary), then runs the default test suite (everything but the `slow`
# label). Extra arguments go to ctest, e.g. ./scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x build/tripod || "${TRIPOD_REBUILD:-1}" == "1" ]]; then
  ./scripts/setup.sh
fi
cmake --build build -j"$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd build
if (($#)); then
  ctest --output-on-failure "$@"
else
  ctest --output-on-failure -LE slow -j"$(nproc)"
fi
