#!/usr/bin/env bash
# One script for the GPU checks of the CUDA backend: build with CUDA, run the
# gpu-labelled tests (every op against the CPU backend in f64), then time the
# kernels. Logs and a summary go to $OUT (default: ./gpu_check_out).
#
#   scripts/gpu_check.sh                    configure + build in build-gpu/, test, bench
#   scripts/gpu_check.sh --stage DIR        (on a build machine) copy the built test and
#                                           bench binaries, plus the non-system shared
#                                           libraries they need, into DIR
#   scripts/gpu_check.sh --prebuilt DIR     (on the GPU machine) run the binaries from DIR
#                                           instead of building (for GPU hosts that lack
#                                           the build dependencies)
# Options: --build-dir DIR (default build-gpu, or build-cuda with --stage),
#          --models "124m 350m 1.5b" (bench shapes and training-speed models; default 124m),
#          --checks "ops bench train speed" (which parts to run; default all four),
#          --data DIR (KJV Megatron data kjv_text_document.{bin,idx} for the
#          bf16/fp16 curves; make it with scripts/quickstart.sh's step 2).
# The train part: 50 fp32 iterations on GPU against the CPU run (metrics within
# 1e-4), bf16 and fp16 loss curves against fp32 over 200 iterations on KJV, a
# forced fp16 overflow; speed: tokens/s and MFU of bf16 training per model.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=build; dir=""; build_dir=""; models="124m"; checks="ops bench train speed"; data_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --stage) mode=stage; dir="$2"; shift 2 ;;
    --prebuilt) mode=prebuilt; dir="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --checks) checks="$2"; shift 2 ;;
    --data) data_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

TARGETS=(test_backend_ops_gpu test_backend_ops_cpu test_cuda_runtime kernels_bench tripod)
bin_path() {  # where a target's binary lies in a build dir
  case "$1" in
    kernels_bench) echo "$2/bench/kernels/kernels_bench" ;;
    tripod) echo "$2/tripod" ;;
    *) echo "$2/tests/backend_ops/$1" ;;
  esac
}

if [[ $mode == stage ]]; then
  build_dir=${build_dir:-build-cuda}
  # STAGE_TARGETS="tripod" stages a subset (e.g. for --checks "train speed").
  read -ra stage_targets <<< "${STAGE_TARGETS:-${TARGETS[*]}}"
  cmake --build "$build_dir" --target "${stage_targets[@]}" -j2 || exit 1
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
  for t in "${stage_targets[@]}"; do cp "$(bin_path "$t" "$build_dir")" "$dir/bin/"; done
  strip --strip-unneeded "$dir"/bin/*
  # Shared libraries from the distribution that a CUDA image may lack; the
  # CUDA libraries themselves (cuBLAS, cuBLASLt) are taken from the GPU host.
  for lib in $(for b in "$dir"/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u |
               grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/libcuda\.so|libcudart|libcublas|libnccl|libcudnn|libnvrtc|libnvJitLink'); do
    cp -L "$lib" "$dir/lib/"
  done
  git rev-parse HEAD > "$dir/COMMIT"
  git status --porcelain -- src/backend tests/backend_ops bench/kernels src/model src/train src/cli | head -20 > "$dir/DIRTY"
  # Compressed, so the carried folder stays far below a 64 MiB transfer limit.
  tar czf "$dir/stage.tgz" -C "$dir" bin lib && rm -rf "$dir/bin" "$dir/lib"
  du -sh "$dir"
  exit 0
fi

OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

note "gpu_check: $(date -u +%Y-%m-%dT%H:%MZ) mode=$mode host=$(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,power.limit --format=csv 2>&1 | tee -a "$summary"
note "glibc: $(ldd --version 2>&1 | head -1)"

if [[ $mode == build ]]; then
  build_dir=${build_dir:-build-gpu}
  note "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIPOD_CUDA=ON > "$OUT/configure.log" 2>&1 ||
    { note "configure FAILED (see configure.log; missing build dependencies? try --prebuilt)"; tail -20 "$OUT/configure.log"; exit 1; }
  cmake --build "$build_dir" --target "${TARGETS[@]}" > "$OUT/build.log" 2>&1 ||
    { note "build FAILED (see build.log)"; tail -30 "$OUT/build.log"; exit 1; }
  BIN_GPU=$(bin_path test_backend_ops_gpu "$build_dir")
  BIN_CPU=$(bin_path test_backend_ops_cpu "$build_dir")
  BIN_BENCH=$(bin_path kernels_bench "$build_dir")
  BIN_RT=$(bin_path test_cuda_runtime "$build_dir")
  BIN_TRIPOD=$(bin_path tripod "$build_dir")
else
  note "commit: $(cat "$dir/COMMIT" 2>/dev/null) (prebuilt; uncommitted: $(wc -l < "$dir/DIRTY" 2>/dev/null) files)"
  if [[ -f "$dir/stage.tgz" ]]; then
    mkdir -p /tmp/tripod_stage && tar xzf "$dir/stage.tgz" -C /tmp/tripod_stage
    cp "$dir/COMMIT" "$dir/DIRTY" /tmp/tripod_stage/ 2>/dev/null; dir=/tmp/tripod_stage
  fi
  BIN_GPU="$dir/bin/test_backend_ops_gpu"; BIN_CPU="$dir/bin/test_backend_ops_cpu"; BIN_BENCH="$dir/bin/kernels_bench"; BIN_RT="$dir/bin/test_cuda_runtime"
  BIN_TRIPOD="$dir/bin/tripod"
  [[ $dir == /* ]] || dir="$PWD/$dir"
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  # Find any CUDA library the host keeps elsewhere (e.g. in Python wheels).
  for miss in $(for b in "$BIN_GPU" "$BIN_TRIPOD"; do [[ -x $b ]] && ldd "$b"; done | awk '/not found/ {print $1}' | sort -u); do
    found=$(find /usr /opt -name "$miss" 2>/dev/null | head -1)
    [[ -n $found ]] && export LD_LIBRARY_PATH="$(dirname "$found"):$LD_LIBRARY_PATH"
    note "library $miss -> ${found:-NOT FOUND}"
  done
fi

has() { [[ " $checks " == *" $1 "* ]]; }
if has ops; then
note "---- tests (every op vs CPU f64) ----"
"$BIN_CPU" > "$OUT/test_cpu.log" 2>&1; note "test_backend_ops_cpu rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test_cpu.log" | tr '\n' ' ')"
"$BIN_RT" > "$OUT/test_runtime.log" 2>&1; note "test_cuda_runtime rc=$? $(grep -E '^\[  PASSED|^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [0-9]' "$OUT/test_runtime.log" | tr '\n' ' ')"
"$BIN_GPU" > "$OUT/test_gpu.log" 2>&1; rc=$?
note "test_backend_ops_gpu rc=$rc $(grep -E '^\[  PASSED|^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [0-9]' "$OUT/test_gpu.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] All' "$OUT/test_gpu.log" | tee -a "$summary"
# Worst NMSE per dtype (lines: "  name  OK nmse=...").
awk '/^\[cuda/ {dt=$(NF-1); sub("]","",dt)} /nmse=/ {split($0,a,"nmse="); split(a[2],b," "); v=b[1]+0; if (v>worst[dt]) worst[dt]=v}
     END {for (d in worst) printf "worst nmse %s: %.3e\n", d, worst[d]}' "$OUT/test_gpu.log" | tee -a "$summary"

# The fallback attention kernels (TRIPOD_CUDA_ATTENTION=wmma: tensor cores
# without cuDNN; =scalar: CUDA cores; docs/debugging.md), so they stay checked. The first tensor-core
# backward is a dev variant now (bench/dev/cuda, checked by its own program).
for impl in wmma scalar; do
  TRIPOD_CUDA_ATTENTION=$impl "$BIN_GPU" --gtest_filter='*attention*' > "$OUT/test_gpu_attention_$impl.log" 2>&1
  note "attention tests with TRIPOD_CUDA_ATTENTION=$impl rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test_gpu_attention_$impl.log" | tr '\n' ' ')"
done

fi
if has bench; then
note "---- kernel timings ----"
for m in $models; do
  timeout 300 "$BIN_BENCH" --model "$m" --out "$OUT/bench_$m.md" > "$OUT/bench_$m.log" 2>&1
  note "kernels_bench $m rc=$?"
  cat "$OUT/bench_$m.log" >> "$summary"
  for impl in scalar; do
    note "attention with TRIPOD_CUDA_ATTENTION=$impl, $m:"
    TRIPOD_CUDA_ATTENTION=$impl timeout 120 "$BIN_BENCH" --model "$m" --only attention 2>&1 | grep attention_ | tee -a "$summary"
  done
done
fi
if has train || has speed; then
  source scripts/gpu_train_check.sh
  has train && train_checks
  has speed && speed_checks
fi
# At most 8 files come back from some GPU hosts: keep summary.txt and the
# default test log loose, pack the rest.
(cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude=summary.txt --exclude=test_gpu.log \
   $(ls | grep -vE '^(logs.tar.gz|summary.txt|test_gpu.log)$') && \
   ls | grep -vE '^(logs.tar.gz|summary.txt|test_gpu.log)$' | xargs rm -f)
tail -60 "$summary"
