#!/usr/bin/env bash
# GPU check of the attention paths, on binaries staged by
#   scripts/gpu_check.sh --stage DIR        (on a build machine)
# then, on the GPU machine:
#   scripts/gpu_attention_check.sh DIR
# 1. the attention op tests (CUDA vs CPU f64) for each TRIPOD_CUDA_ATTENTION
#    value: auto, cudnn (fails if cuDNN cannot run), cudnn-det, cudnn-atomic, wmma;
# 2. kernels_bench timings at the attention shapes for the same values;
# 3. scripts/attention_torch_bench.py: errors against an f32 reference next to
#    torch SDPA (cuDNN and flash backends), and torch's timings.
# Logs and summary.txt go to $OUT (default ./gpu_attention_out).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: gpu_attention_check.sh STAGED_DIR}
OUT=${OUT:-$PWD/gpu_attention_out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

note "gpu_attention_check: $(date -u +%Y-%m-%dT%H:%MZ) commit $(cat "$dir/COMMIT" 2>/dev/null) (uncommitted files: $(wc -l < "$dir/DIRTY" 2>/dev/null))"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | tee -a "$summary"
stage=/tmp/tripod_attn_stage
rm -rf "$stage" && mkdir -p "$stage" && tar xzf "$dir/stage.tgz" -C "$stage" || { note "no $dir/stage.tgz"; exit 1; }
export LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
# cuDNN is dlopen'ed (libcudnn.so.9): add its folder (and NVRTC's, for its
# runtime-compiled engines) when the loader does not already know it.
if ! ldconfig -p | grep -q 'libcudnn.so.9'; then
  for lib in libcudnn.so.9 libnvrtc.so.13 libnvrtc.so.12; do
    found=$(find /usr /opt -name "$lib" 2>/dev/null | head -1)
    [[ -n $found ]] && export LD_LIBRARY_PATH="$(dirname "$found"):$LD_LIBRARY_PATH"
    note "library $lib -> ${found:-not found}"
  done
fi
BIN_GPU="$stage/bin/test_backend_ops_gpu"
BIN_BENCH="$stage/bin/kernels_bench"

note "---- attention op tests (CUDA vs CPU f64) ----"
for impl in auto cudnn cudnn-det cudnn-atomic wmma; do
  TRIPOD_CUDA_ATTENTION=$impl "$BIN_GPU" --gtest_filter='*attention*' > "$OUT/test_$impl.log" 2>&1
  note "TRIPOD_CUDA_ATTENTION=$impl rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test_$impl.log" | tr '\n' ' ')"
  grep -E 'attention (forward|backward)' "$OUT/test_$impl.log" | sort -u | sed 's/^/  /' | tee -a "$summary"
  grep -E '^\[  FAILED  \] [a-z]' "$OUT/test_$impl.log" | head -5 | tee -a "$summary"
done

note "---- kernels_bench attention (tripod) ----"
for impl in cudnn cudnn-det cudnn-atomic wmma; do
  note "TRIPOD_CUDA_ATTENTION=$impl:"
  TRIPOD_CUDA_ATTENTION=$impl timeout 120 "$BIN_BENCH" --only attention_shapes 2>&1 | grep -E 'attention' | tee -a "$summary"
done
TRIPOD_CUDA_ATTENTION=auto timeout 120 "$BIN_BENCH" --only attention 2>&1 | grep -E 'attention' | tee -a "$summary"

note "---- PyTorch comparison ----"
PYTHONUNBUFFERED=1 timeout 300 python3 "$here/attention_torch_bench.py" --bin "$BIN_BENCH" --out "$OUT/torch.txt" \
  > "$OUT/torch.log" 2>&1
note "attention_torch_bench rc=$?"
cat "$OUT/torch.log" | tee -a "$summary"
