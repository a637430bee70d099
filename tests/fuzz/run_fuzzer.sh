#!/usr/bin/env bash
# One libFuzzer run of a fuzz target (ctest -L fuzz in a -DTRIPOD_FUZZ=ON
# build; see docs/testing.md, "Fuzzing"):
#   run_fuzzer.sh <target> <seconds> [extra libFuzzer flags...]
# The corpus starts from the seeds written by the real writers
# (fuzz_<target>_replay --write-seeds) and the regression inputs of
# tests/fuzz/regressions/<target>/; what the run finds is kept in
# $FUZZ_BUILD_DIR/fuzz-work/<target>/corpus for the next run. A crash, leak,
# sanitizer report, timeout (10 s per input) or out-of-memory (2 GiB) fails
# the test and leaves the input in fuzz-work/<target>/artifacts/: fix the
# reader, then copy the input into tests/fuzz/regressions/<target>/.
set -euo pipefail
target=$1 seconds=$2
shift 2
build=${FUZZ_BUILD_DIR:?set by ctest} src=${TRIPOD_SOURCE_DIR:?set by ctest}
work=$build/fuzz-work/$target
mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
"$build/fuzz_${target}_replay" --write-seeds "$target" "$work/seeds" "$src"
dirs=("$work/corpus" "$work/seeds")
[[ -d $src/tests/fuzz/regressions/$target ]] && dirs+=("$src/tests/fuzz/regressions/$target")
exec "$build/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "${dirs[@]}"
