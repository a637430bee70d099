#!/usr/bin/env bash
# Mixture-of-experts checks on a GPU machine, with a tripod built elsewhere
# (STAGE_TARGETS="test_backend_ops_gpu tripod" scripts/gpu_check.sh --stage DIR):
#   1. ops: every MoE case of the op harness (router top-k and its backward,
#      the auxiliary losses, the dispatch order, the row gathers, the grouped
#      expert GEMMs; a zero-token
#      expert, all tokens on one expert, top-k equal to the expert count) on
#      the CUDA backend in f32, bf16 and f16 against the CPU backend in f64.
#   2. parity: a tiny Llama-style MoE model, fp32, 20 iterations on the GPU
#      against the same run on the CPU (lm loss, grad norm and the
#      load-balancing loss within 1e-4): Mixtral routing with the aux and
#      z losses; sigmoid routing with the expert bias and a shared expert;
#      a capacity with the "probs" drop policy; Mixtral routing with
#      --moe-grouped-gemm (cuBLAS's grouped GEMM). The Mixtral run twice on the
#      GPU under --deterministic-mode must give the same bits.
#   3. speed: the Mixtral-shaped model (MOE_LAYERS layers, default 16; hidden
#      2048, 32 heads, 8 query groups, 8 experts, top-2, expert ffn 5632,
#      seq 2048, micro-batch 2, vocab 32000) bf16 with tripod, with
#      --moe-grouped-gemm and with the per-expert loop, then
#      bench/model/torch_moe_bench.py in the same lease: tokens/s,
#      active-parameter MFU, peak memory and the ratio.
#
# usage: scripts/gpu_moe_check.sh (--stage DIR | --bin DIR) [--out DIR] [--checks "ops parity speed"]
#   --bin DIR: a build dir holding tripod and tests/backend_ops/test_backend_ops_gpu
# Prints PASS/FAIL lines; exits non-zero when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; bin=""; OUT=${OUT:-gpu_moe_out}; checks="ops parity speed"
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --checks) checks=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_moe_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $checks " == *" $1 "* ]]; }
failed=0
verdict() { [[ $1 == *PASS* ]] || failed=1; note "$1"; }
BIN_TRIPOD=""; BIN_OPS=""
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_moe_stage"
  BIN_OPS="$STAGE_DIR/bin/test_backend_ops_gpu"
elif [[ -n $bin ]]; then
  BIN_TRIPOD="$bin/tripod"; BIN_OPS="$bin/tests/backend_ops/test_backend_ops_gpu"
fi
[[ -x $BIN_TRIPOD ]] || { note "FAIL: no tripod binary (pass --stage DIR or --bin DIR)"; exit 2; }
source scripts/gpu_train_check.sh  # compare_metrics
LLAMA=(--group-query-attention --position-embedding-type rope --normalization RMSNorm --swiglu
       --untie-embeddings-and-output-weights --disable-bias-linear)

if has ops; then
  note "---- op harness: MoE cases, CUDA vs CPU f64 ----"
  if [[ -x $BIN_OPS ]]; then
    timeout 300 "$BIN_OPS" --gtest_filter='*moe*:*grouped_matmul*' > "$OUT/ops.log" 2>&1; rc=$?
    cases=$(grep -c '^\[       OK \]' "$OUT/ops.log")
    grep -E '^\[  FAILED  \] All' "$OUT/ops.log" | tee -a "$summary"
    worst=$(awk '/nmse=/ {split($0,a,"nmse="); split(a[2],b," "); v=b[1]+0; if (v>w) w=v} END {printf "%.3e", w}' \
      "$OUT/ops.log")
    [[ $rc == 0 && $cases -gt 0 ]] && verdict "PASS ops: $cases MoE cases, worst nmse $worst" ||
      verdict "FAIL ops: rc=$rc, $cases cases passed (see $OUT/ops.log)"
  else
    verdict "FAIL ops: no test_backend_ops_gpu binary"
  fi
fi

if has parity; then
  note "---- MoE model: fp32 GPU vs CPU (20 iterations, mock data) ----"
  small=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --num-query-groups 2 --seq-length 64
         --mock-data --vocab-size 512 --micro-batch-size 4 --global-batch-size 8 --train-iters 20 --lr 1e-3
         --lr-warmup-iters 2 --log-interval 1 --eval-interval 0 --seed 1234 "${LLAMA[@]}"
         --num-experts 4 --moe-ffn-hidden-size 96)
  declare -A variant=(
    [mixtral]="--moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3"
    [sigmoid]="--moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
               --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 64 --moe-aux-loss-coeff 1e-2"
    [capacity]="--moe-router-topk 2 --moe-expert-capacity-factor 1.0 --moe-token-drop-policy probs
                --moe-aux-loss-coeff 1e-2 --moe-router-pre-softmax"
    [grouped]="--moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 --moe-grouped-gemm")
  for v in mixtral sigmoid capacity grouped; do
    read -ra extra <<< "${variant[$v]//$'\n'/ }"
    OMP_NUM_THREADS=$(nproc) timeout 120 "$BIN_TRIPOD" train --device cpu "${small[@]}" "${extra[@]}" \
      --metrics-file "$OUT/${v}_cpu.jsonl" > "$OUT/${v}_cpu.log" 2>&1; rc_c=$?
    timeout 120 "$BIN_TRIPOD" train --device cuda "${small[@]}" "${extra[@]}" \
      --metrics-file "$OUT/${v}_gpu.jsonl" > "$OUT/${v}_gpu.log" 2>&1; rc_g=$?
    if [[ $rc_c != 0 || $rc_g != 0 ]]; then
      verdict "FAIL parity $v: cpu rc=$rc_c gpu rc=$rc_g (see $OUT/${v}_gpu.log)"; tail -3 "$OUT/${v}_gpu.log"; continue
    fi
    for k in lm_loss grad_norm; do verdict "parity $v $(compare_metrics "$OUT/${v}_cpu.jsonl" "$OUT/${v}_gpu.jsonl" $k 1e-4)"; done
    [[ $v == capacity || $v == mixtral || $v == grouped ]] &&
      verdict "parity $v $(compare_metrics "$OUT/${v}_cpu.jsonl" "$OUT/${v}_gpu.jsonl" moe_load_balancing_loss 1e-4)"
  done
  # Two runs under --deterministic-mode give the same bits (without it the
  # word embedding's gradient and cuDNN's dQ sum with atomics, and two runs
  # differ by ~5e-9 from iteration 3).
  read -ra extra <<< "${variant[mixtral]}"
  for r in 1 2; do
    timeout 120 "$BIN_TRIPOD" train --device cuda "${small[@]}" "${extra[@]}" --deterministic-mode \
      --metrics-file "$OUT/mixtral_det$r.jsonl" > "$OUT/mixtral_det$r.log" 2>&1
  done
  verdict "determinism mixtral --deterministic-mode gpu run 2 vs run 1 $(compare_metrics "$OUT/mixtral_det1.jsonl" "$OUT/mixtral_det2.jsonl" lm_loss 0)"
fi

if has speed; then
  L=${MOE_LAYERS:-16}
  note "---- Mixtral-shaped speed: L$L, hidden 2048, 8 experts top-2, expert ffn 5632, seq 2048, mbs 2, bf16 ----"
  shape=(--num-layers "$L" --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --seq-length 2048
         --vocab-size 32000 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632 --moe-aux-loss-coeff 1e-2)
  declare -A speed_tps
  for kind in grouped loop; do  # --moe-grouped-gemm (one cuBLAS grouped GEMM) and the per-expert loop
    extra=(); [[ $kind == grouped ]] && extra=(--moe-grouped-gemm)
    timeout 300 "$BIN_TRIPOD" train --device cuda --bf16 "${shape[@]}" "${extra[@]}" "${LLAMA[@]}" --mock-data \
      --micro-batch-size 2 --global-batch-size 2 --train-iters 30 --log-interval 10 --eval-interval 0 --lr 1e-4 \
      --metrics-file "$OUT/speed_tripod_$kind.jsonl" > "$OUT/speed_tripod_$kind.log" 2>&1; rc=$?
    tripod_line=$(python3 - "$OUT/speed_tripod_$kind.jsonl" <<'PY' 2>&1
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if x["iteration"] > 10]
ms = sum(x["elapsed_ms"] for x in r) / len(r)
tps = sum(x["tokens_per_sec"] * x["elapsed_ms"] for x in r) / len(r) / ms
mfu = r[-1]["mfu"] * tps / r[-1]["tokens_per_sec"] if r[-1].get("mfu") else float("nan")
peak = max(x.get("mem_peak_bytes", 0) for x in r) / 2**30
print(f"{tps:.0f} {100 * mfu:.1f} {peak:.1f} {ms:.1f}")
PY
)
    read -r t_tps t_mfu t_peak t_ms <<< "$tripod_line"
    speed_tps[$kind]=${t_tps:-}
    note "tripod moe $kind rc=$rc: ${t_tps:-?} tok/s  ${t_ms:-?} ms/iteration  active-parameter MFU ${t_mfu:-?}%  peak ${t_peak:-?} GiB"
    grep -m1 "memory on rank 0" "$OUT/speed_tripod_$kind.log" | tee -a "$summary"
    grep -m1 "refused a grouped GEMM" "$OUT/speed_tripod_$kind.log" | tee -a "$summary"
    [[ $rc == 0 ]] || { tail -5 "$OUT/speed_tripod_$kind.log" | tee -a "$summary"; failed=1; }
  done
  t_tps=${speed_tps[loop]:-}
  timeout 600 python3 bench/model/torch_moe_bench.py "$L" 2048 32 8 8 2 5632 2 2048 32000 30 \
    > "$OUT/speed_torch.log" 2>&1; rc=$?
  note "torch moe rc=$rc: $(tail -1 "$OUT/speed_torch.log")"
  p_tps=$(grep -oE '[0-9,]+ tok/s' "$OUT/speed_torch.log" | tail -1 | tr -d ', tok/s')
  if [[ -n ${t_tps:-} && -n $p_tps ]]; then
    note "ratio tripod (per-expert loop, the default) / torch: $(python3 -c "print(f'{$t_tps / $p_tps:.2f}x')")"
    [[ -n ${speed_tps[grouped]:-} ]] &&
      note "ratio tripod (--moe-grouped-gemm) / torch: $(python3 -c "print(f'{${speed_tps[grouped]} / $p_tps:.2f}x')")"
  fi
fi
note "gpu_moe_check: $([[ $failed == 0 ]] && echo ALL PASS || echo FAILED)"
exit $failed
