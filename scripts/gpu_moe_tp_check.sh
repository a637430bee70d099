#!/usr/bin/env bash
# Mixture-of-experts layers under tensor (with sequence) and context
# parallelism on GPU kernels with ONE GPU: the ranks share the GPU over the
# host-staged Gloo communicator (--distributed-backend gloo, started by
# `tripod launch`), each layout against the single-GPU run of the same
# model (docs/moe.md, "Tensor, sequence and context parallelism"):
#   tp2_sp, ep2_tp2_sp (ep on tp), cp2, ep2_cp2 (ep on cp), a gated shared
#   expert at tp2_sp, sigmoid routing with the expert bias at tp2_sp, and
#   seq_aux_loss with the shared expert at tp2 x cp2 x ep4 (4 ranks), the
#   experts split over tp (--expert-tensor-parallel-size 2) at tp2_sp and,
#   with the shared expert, at ep2 x etp2 x tp2 (4 ranks):
#   lm loss, grad norm and the load-balancing loss of 20 fp32 iterations
#   within 1e-4 of one GPU.
# A tiny Llama-style model (RoPE, GQA, SwiGLU experts), 8 experts, top-2,
# the aux and z losses on. About a minute on one H200.
#
#   STAGE_TARGETS=tripod scripts/gpu_check.sh --stage DIR   (build machine)
#   scripts/gpu_moe_tp_check.sh --stage DIR                 (GPU machine)
#   scripts/gpu_moe_tp_check.sh --bin BUILD_DIR             (a CUDA build here)
# MOE_TP_DEVICE=cpu runs the same plumbing on the CPU backend (a dry run
# without a GPU); MOE_TP_ONLY=etp runs the layouts named so. Prints PASS/FAIL
# lines; exits non-zero when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; bin=""; OUT=${OUT:-gpu_moe_tp_out}
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu_moe_tp_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
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
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_moe_tp_stage"
elif [[ -n $bin ]]; then
  BIN_TRIPOD="$bin/tripod"
fi
[[ -x $BIN_TRIPOD ]] || { note "FAIL: no tripod binary (pass --stage DIR or --bin DIR)"; exit 2; }
source scripts/gpu_train_check.sh  # compare_metrics
DEVICE=${MOE_TP_DEVICE:-cuda}

model=(--device "$DEVICE" --num-layers 2 --hidden-size 128 --num-attention-heads 4 --group-query-attention
       --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu
       --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 64 --mock-data --vocab-size 512
       --micro-batch-size 4 --global-batch-size 8 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
       --eval-interval 0 --seed 1234 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 96
       --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 --distributed-timeout-minutes 1)
declare -A variant=(
  [mixtral]=""
  [shared]="--moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate --moe-router-pre-softmax"
  [sigmoid]="--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-layer-freq [0,1]"
  [seqaux]="--moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate --moe-router-load-balancing-type seq_aux_loss")
# The sigmoid variant keeps the default bias update rate and one MoE layer:
# with --moe-router-bias-update-rate 1e-2 on both layers this model flips a
# routing choice at iteration 10 from rounding alone (dp2 against one
# process does too, on the CPU: grad norm 1.3e-4 apart there, 4e-4 by
# iteration 20), which says nothing about the layouts.
# name:ranks:variant:layout flags
layouts=(
  "tp2_sp:2:mixtral:--tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1"
  "ep2_tp2_sp:2:mixtral:--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 --expert-tensor-parallel-size 1"
  "cp2:2:mixtral:--context-parallel-size 2"
  "ep2_cp2:2:mixtral:--context-parallel-size 2 --expert-model-parallel-size 2"
  "shared_tp2_sp:2:shared:--tensor-model-parallel-size 2 --sequence-parallel"
  "sigmoid_bias_tp2_sp:2:sigmoid:--tensor-model-parallel-size 2 --sequence-parallel"
  "seqaux_ep4_tp2_cp2_sp:4:seqaux:--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel --expert-model-parallel-size 4 --expert-tensor-parallel-size 1"
  "etp2_tp2_sp:2:mixtral:--tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 2"
  "shared_ep2_etp2_tp2_sp:4:shared:--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 --expert-tensor-parallel-size 2")
# MOE_TP_ONLY=REGEX runs only the layouts whose names match (and their
# single-process references).
if [[ -n ${MOE_TP_ONLY:-} ]]; then
  kept=(); for e in "${layouts[@]}"; do [[ ${e%%:*} =~ $MOE_TP_ONLY ]] && kept+=("$e"); done; layouts=("${kept[@]}")
fi

# run TAG NPROC VARIANT [LAYOUT FLAGS...]
run() {
  local tag=$1 n=$2 v=$3; shift 3
  local extra; read -ra extra <<< "${variant[$v]}"
  local t0=$SECONDS rc
  if [[ $n == 1 ]]; then
    timeout 120 "$BIN_TRIPOD" train "${model[@]}" "${extra[@]}" --metrics-file "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1
  else
    timeout 120 "$BIN_TRIPOD" launch --nproc-per-node "$n" train "${model[@]}" "${extra[@]}" \
      --distributed-backend gloo "$@" --metrics-file "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1
  fi
  rc=$?
  note "run $tag ($n rank(s)) rc=$rc $((SECONDS - t0)) s"
  [[ $rc == 0 ]] || { grep -m3 -iE "error|what\(\)" "$OUT/$tag.log" | cut -c1-400 | tee -a "$summary"; return 1; }
}

note "---- MoE under tp, sp and cp: $DEVICE, ranks sharing one device, against one process ----"
for v in mixtral shared sigmoid seqaux; do
  [[ " ${layouts[*]}" == *":$v:"* ]] || continue
  run "single_$v" 1 "$v" || verdict "FAIL single $v"
done
for entry in "${layouts[@]}"; do
  IFS=: read -r name n v flags <<< "$entry"
  read -ra lf <<< "$flags"
  if ! run "$name" "$n" "$v" "${lf[@]}"; then verdict "FAIL $name: the run failed (see $OUT/$name.log)"; continue; fi
  for k in lm_loss grad_norm moe_load_balancing_loss; do
    verdict "$name $(compare_metrics "$OUT/single_$v.jsonl" "$OUT/$name.jsonl" $k 1e-4)"
  done
done
note "gpu_moe_tp_check: $([[ $failed == 0 ]] && echo ALL PASS || echo FAILED)"
exit $failed
