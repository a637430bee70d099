#!/usr/bin/env bash
# Context parallelism's --cp-comm-type a2a (head all-to-all) and all_gather on
# GPU kernels with ONE GPU (ranks sharing it over the staged Gloo
# communicator): the op harness's gather_rows cases (CUDA against the CPU
# backend in f64), then gpu_layouts_check.sh's CP2, CP4, TP2xCP2+SP a2a and
# CP2 all_gather layouts (fp32: lm loss and grad norm of iterations 1-20
# within 1e-5 of the single-GPU run, and a Llama model with GQA at CP2 a2a;
# bf16: lm loss within 1% over 50 iterations). PASS/FAIL lines; exits
# non-zero on any failure. Output in $OUT (default ./gpu_cp_a2a_out).
#
#   STAGE_TARGETS="tripod test_backend_ops_gpu" scripts/gpu_check.sh --stage DIR   (build machine)
#   scripts/gpu_cp_a2a_check.sh --prebuilt DIR                                      (GPU machine)
set -uo pipefail
cd "$(dirname "$0")/.."
[[ ${1:-} == --prebuilt && -n ${2:-} ]] || { echo "gpu_cp_a2a_check.sh: give --prebuilt DIR" >&2; exit 2; }
dir=$2
export OUT=${OUT:-$PWD/gpu_cp_a2a_out}
mkdir -p "$OUT"
fails=0
stage=$dir
if [[ -f $dir/stage.tgz ]]; then stage=/tmp/tripod_cp_a2a; mkdir -p "$stage" && tar xzf "$dir/stage.tgz" -C "$stage"; fi
if [[ -x $stage/bin/test_backend_ops_gpu ]]; then
  LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" timeout 120 \
    "$stage/bin/test_backend_ops_gpu" --gtest_filter='*gather_rows*' > "$OUT/ops_gather_rows.log" 2>&1
  rc=$?
  n=$(grep -c '^\[       OK \]' "$OUT/ops_gather_rows.log")
  if [[ $rc == 0 && $n -ge 2 ]]; then echo "op harness gather_rows on CUDA ($n cases) -> PASS"
  else echo "op harness gather_rows on CUDA rc=$rc ($n cases passed) -> FAIL"; fails=$((fails + 1)); fi
else
  echo "op harness: no test_backend_ops_gpu in $dir (stage it with STAGE_TARGETS) -> FAIL"; fails=$((fails + 1))
fi
LAYOUTS_NAMES="cp2_a2a cp4_a2a tp2cp2_sp_a2a cp2_allgather" scripts/gpu_layouts_check.sh --prebuilt "$dir" \
  --checks "fp32 bf16"
rc=$?
[[ $rc == 0 ]] || fails=$((fails + 1))
echo "gpu_cp_a2a_check: layouts rc=$rc; $fails failure(s) -> $([[ $fails == 0 ]] && echo PASS || echo FAIL)"
exit $((fails > 0))
