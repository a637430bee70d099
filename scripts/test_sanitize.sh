#!/usr/bin/env bash
# A sanitizer build of the tests that run in-process (no tripod executable,
# no launchers), and those tests: what CI runs after ./scripts/test.sh.
#
#   ./scripts/test_sanitize.sh            ASan + UBSan (preset asan-ubsan, build-asan/):
#                                         base, data, ckpt, comm and time-split unit tests
#                                         and the fuzz regression replays
#   ./scripts/test_sanitize.sh tsan       ThreadSanitizer (preset tsan, build-tsan/): the
#                                         stores, rendezvous and communicator tests
#
# The whole default suite under a sanitizer: cmake --preset asan-ubsan &&
# cmake --build --preset asan-ubsan && ctest --preset asan-ubsan (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-asan-ubsan}"
case "$preset" in
  asan-ubsan)
    tests=(test_config test_debug_config test_indexed_dataset test_gpt_dataset test_megatron_rules test_tokenizer
           test_safetensors test_checkpoint test_store test_rendezvous test_layout test_collectives test_staged
           test_timed_communicator test_ipc)
    fuzz_replays=1 ;;
  tsan)
    tests=(test_store test_rendezvous test_collectives test_staged test_timed_communicator)
    fuzz_replays=0 ;;
  *) echo "usage: $0 [asan-ubsan|tsan]" >&2; exit 2 ;;
esac
build="build-${preset%%-*}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
start=$SECONDS
cmake --preset "$preset" "${launcher[@]}" >/dev/null
targets=("${tests[@]}")
((fuzz_replays)) && targets+=(fuzz_all)  # without TRIPOD_FUZZ: the replays only
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
regex="^($(IFS='|'; echo "${tests[*]}"))\$"
((fuzz_replays)) && regex="$regex|^fuzz_.*_replay\$"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadly_signal=1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -R "$regex"
echo "[test_sanitize] $preset: built and passed in $((SECONDS - start)) s"
