#!/usr/bin/env bash
# Expert parallelism with each rank storing only its experts (docs/moe.md,
# "Expert parallelism"), over NCCL on 2 GPUs of one host (nvidia-h200-x2),
# with a tripod built elsewhere (STAGE_TARGETS=tripod scripts/gpu_check.sh --stage DIR):
#   a tiny Llama-style MoE model (4 experts, top-2), fp32, 20 iterations,
#   at ep 2 on 2 GPUs against the same model on 1 GPU: lm loss and grad
#   norm within 1e-4 for the plain optimizer with --clip-grad 0.05 (every
#   step clipped: the expert part of the norm is summed over ep), the
#   distributed optimizer and ZeRO-3 (the experts' buckets reduce-scattered
#   and gathered over edp, the dense ones over dp); and rank 0's parameter
#   count at ep 2 smaller than at ep 1 by 2 layers x 2 experts x one
#   expert's parameters (start-up memory line).
# About a minute. usage: scripts/gpu_ep_shard_check.sh (--stage DIR | --bin DIR) [--out DIR]
# Prints PASS/FAIL lines; exits non-zero when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; bin=""; OUT=${OUT:-gpu_ep_shard_out}
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu_ep_shard_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
failed=0
verdict() { [[ $1 == *PASS* ]] || failed=1; note "$1"; }
BIN_TRIPOD=""
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_ep_shard_stage"
elif [[ -n $bin ]]; then
  BIN_TRIPOD="$bin/tripod"
fi
[[ -x $BIN_TRIPOD ]] || { note "FAIL: no tripod binary (pass --stage DIR or --bin DIR)"; exit 2; }
source scripts/gpu_train_check.sh  # compare_metrics
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[[ $gpus -ge 2 ]] || { note "FAIL: $gpus GPU(s) visible; this check needs 2 (nvidia-h200-x2)"; exit 2; }

# Hidden 128, 4 experts of width 96 under SwiGLU without biases: one
# expert is fc1 (192, 128) + fc2 (128, 96) = 36,864 parameters.
small=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --group-query-attention --num-query-groups 2
       --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights
       --disable-bias-linear --seq-length 64 --mock-data --vocab-size 512 --micro-batch-size 4
       --global-batch-size 8 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1 --eval-interval 0
       --seed 1234 --adam-eps 1e-6 --num-experts 4 --moe-ffn-hidden-size 96 --moe-router-topk 2
       --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
rank0_params() { grep -o 'memory on rank 0 ([^)]*): [0-9]* params' "$1" | head -1 | awk '{print $(NF-1)}'; }

declare -A variant=(
  [clip]="--clip-grad 0.05"
  [distopt]="--use-distributed-optimizer"
  [zero3]="--data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce --overlap-param-gather")
for v in clip distopt zero3; do
  read -ra extra <<< "${variant[$v]}"
  note "---- $v: ep 2 on 2 GPUs vs 1 GPU ----"
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN_TRIPOD" train --device cuda "${small[@]}" "${extra[@]}" \
    --metrics-file "$OUT/${v}_one.jsonl" > "$OUT/${v}_one.log" 2>&1; rc1=$?
  timeout 180 "$BIN_TRIPOD" launch --nproc-per-node 2 train --device cuda "${small[@]}" "${extra[@]}" \
    --expert-model-parallel-size 2 --metrics-file "$OUT/${v}_ep2.jsonl" > "$OUT/${v}_ep2.log" 2>&1; rc2=$?
  if [[ $rc1 != 0 || $rc2 != 0 ]]; then
    verdict "FAIL $v: 1 GPU rc=$rc1, ep 2 rc=$rc2 (see $OUT/${v}_ep2.log)"; tail -3 "$OUT/${v}_ep2.log"; continue
  fi
  for k in lm_loss grad_norm; do verdict "$v $(compare_metrics "$OUT/${v}_one.jsonl" "$OUT/${v}_ep2.jsonl" $k 1e-4)"; done
done

one=$(rank0_params "$OUT/clip_one.log"); two=$(rank0_params "$OUT/clip_ep2.log")
want=$((2 * 2 * (192 * 128 + 128 * 96)))
if [[ -n $one && -n $two && $((one - two)) == "$want" ]]; then
  verdict "PASS storage: rank 0 holds $two parameters at ep 2, $one at ep 1 ($want fewer: 2 layers x 2 experts)"
else
  verdict "FAIL storage: rank 0 holds '$two' parameters at ep 2, '$one' at ep 1 (want $want fewer)"
fi
[[ $failed == 0 ]] && note "ALL PASS" || note "SOME CHECKS FAILED"
exit $failed
