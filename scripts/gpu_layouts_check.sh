#!/usr/bin/env bash
# Every parallel layout on GPU kernels with ONE GPU: ranks share the GPU over
# the host-staged Gloo communicator (--distributed-backend gloo), started by
# `tripod launch`, and are compared with the single-GPU run. Logs, metrics and
# a summary go to $OUT (default: ./gpu_layouts_out).
#
#   scripts/gpu_check.sh --stage DIR            (build machine; STAGE_TARGETS=tripod is enough)
#   scripts/gpu_layouts_check.sh --prebuilt DIR (GPU machine)
#   scripts/gpu_layouts_check.sh --tripod BIN   (a tripod binary built here with CUDA)
# Options: --checks "comm fp32 bf16 ckpt" (default all four). Environment:
# LAYOUTS_NAMES (a subset of the layouts), LAYOUTS_BACKEND=nccl (one GPU per rank).
# LAYOUTS_DEVICE=cpu runs the same plumbing on the CPU backend (a dry run of
# the script without a GPU; bf16 and the NCCL check are skipped).
#  comm  `tripod bench comm` through the staged communicator at 2, 4 and 8
#        ranks on the GPU (every collective's data checked; exit code), its
#        overhead against host Gloo, and the NCCL error when ranks would share
#  fp32  30 iterations of TP2, TP2+SP, PP2, PP2+vpp, DP2, DP2+distributed
#        optimizer+both overlaps, CP2, CP4, TP2xCP2+SP, CP2xDP2+distributed
#        optimizer (context parallelism's ring attention on the GPU's block
#        attention kernels), CP2, CP4 and TP2xCP2+SP with --cp-comm-type a2a
#        (head all-to-all), CP2 all_gather, TP2xPP2xDP2+vpp+SP+distributed optimizer+
#        overlaps (8 ranks): lm loss and grad norm of iterations 1-20 within
#        1e-5 of the single-GPU run (and the worst over 1-30, reported); and
#        a Llama-style model (RoPE at the chunks' positions, grouped-query
#        attention) at CP2 (ring and a2a) against its own single-GPU run
#  bf16  the same layouts, 50 iterations: lm loss within 1% of single-GPU bf16
#  ckpt  the 8-rank layout saves at iteration 20; one GPU process loads it and
#        runs 21-30: within 1e-5 of the 8-rank run's own 21-30
set -uo pipefail
cd "$(dirname "$0")/.."

checks="comm fp32 bf16 ckpt"
source scripts/stage_env.sh
gpu_check_args gpu_layouts_check 28 "$@"
set -- "${EXTRA_ARGS[@]}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --checks) checks="$2"; shift 2 ;;
    *) gpu_check_unknown "$1" ;;
  esac
done
gpu_check_open
DEVICE=${LAYOUTS_DEVICE:-cuda}
[[ $DEVICE == cpu ]] && checks=${checks//bf16/}
has() { [[ " $checks " == *" $1 "* ]]; }
# Shared GPU hosts: keep NVLink multicast off in NCCL.
export NCCL_NVLS_ENABLE=0
verdict() { note "$1"; }


# The model and flags of the CPU parity suite (tests/parity/test_parity.cpp),
# wider: 4 layers so that PP2 x vpp2 has one layer per virtual stage; 8
# micro-batches per iteration; --adam-eps 1e-6 (NOTE [Zero-gradient
# parameters and Adam] there). Dropout off except in the *_dropout pair.
model=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --mock-data --vocab-size 1024
       --micro-batch-size 2 --global-batch-size 16 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 3
       --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-eps 1e-6 --seed 7
       --log-interval 1 --eval-interval 0 --device $DEVICE)
dopt=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 30000)
declare -A layout_n layout_flags
names=(tp2 tp2_sp pp2 pp2_vpp dp2 dp2_dopt dp2_zero2 dp2_zero3 cp2 cp4 tp2cp2_sp cp2dp2_dopt cp2_a2a cp4_a2a tp2cp2_sp_a2a
       cp2_allgather tp2pp2_dopt tp2pp2dp2)
layout_n[tp2]=2;       layout_flags[tp2]="--tensor-model-parallel-size 2"
layout_n[tp2_sp]=2;    layout_flags[tp2_sp]="--tensor-model-parallel-size 2 --sequence-parallel"
layout_n[pp2]=2;       layout_flags[pp2]="--pipeline-model-parallel-size 2"
layout_n[pp2_vpp]=2;   layout_flags[pp2_vpp]="--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
layout_n[dp2]=2;       layout_flags[dp2]=""
layout_n[dp2_dopt]=2;  layout_flags[dp2_dopt]="${dopt[*]}"
# ZeRO-2 / ZeRO-3 (docs/zero.md); ZeRO-3 with the next layer's all-gather prefetched.
layout_n[dp2_zero2]=2; layout_flags[dp2_zero2]="--data-parallel-sharding-strategy optim_grads"
layout_n[dp2_zero3]=2; layout_flags[dp2_zero3]="--data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce --overlap-param-gather"
# Context parallelism: each rank holds 2 of the 2 x cp chunks of a sequence (128 / 8 = 16 rows at cp 4).
layout_n[cp2]=2;         layout_flags[cp2]="--context-parallel-size 2"
layout_n[cp4]=4;         layout_flags[cp4]="--context-parallel-size 4"
layout_n[tp2cp2_sp]=4;   layout_flags[tp2cp2_sp]="--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel"
layout_n[cp2dp2_dopt]=4; layout_flags[cp2dp2_dopt]="--context-parallel-size 2 ${dopt[*]}"
# --cp-comm-type a2a (the head all-to-all: 4 heads over cp 4, 2 per tp rank over cp 2) and all_gather.
layout_n[cp2_a2a]=2;       layout_flags[cp2_a2a]="--context-parallel-size 2 --cp-comm-type a2a"
layout_n[cp4_a2a]=4;       layout_flags[cp4_a2a]="--context-parallel-size 4 --cp-comm-type a2a"
layout_n[tp2cp2_sp_a2a]=4; layout_flags[tp2cp2_sp_a2a]="--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel --cp-comm-type a2a"
layout_n[cp2_allgather]=2; layout_flags[cp2_allgather]="--context-parallel-size 2 --cp-comm-type all_gather"
# A Llama-style model for context parallelism's RoPE at chunk positions (head size 32, 2 K/V groups).
llama=(--group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu
       --ffn-hidden-size 256 --untie-embeddings-and-output-weights --disable-bias-linear)
# dp 1 with the distributed optimizer: its shard copies go through a size-1
# group (comm/local_communicator.h), which must order them after the compute
# stream (they once read gradients still being written: loss ln V by step 2).
layout_n[tp2pp2_dopt]=4; layout_flags[tp2pp2_dopt]="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 ${dopt[*]}"
layout_n[tp2pp2dp2]=8; layout_flags[tp2pp2dp2]="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --sequence-parallel ${dopt[*]}"
# LAYOUTS_NAMES="tp2 dp2_zero3" runs a subset; LAYOUTS_BACKEND=nccl runs the
# layouts over NCCL with one GPU per rank (a machine with as many GPUs as the
# largest layout has ranks) instead of ranks sharing one GPU over Gloo.
[[ -n ${LAYOUTS_NAMES:-} ]] && read -ra names <<< "$LAYOUTS_NAMES"
BACKEND=${LAYOUTS_BACKEND:-gloo}

# run TAG NPROC ARGS...: one training run (NPROC 1: a plain process), its
# log and metrics under $OUT. A collective that hangs fails after 1 minute
# (naming the missing ranks) instead of running into the kill timeout.
run() {
  local tag=$1 n=$2; shift 2
  local t0=$SECONDS rc
  local common=(--distributed-timeout-minutes 1 --metrics-file "$OUT/$tag.jsonl")
  if [[ $n == 1 ]]; then
    timeout 120 "$BIN_TRIPOD" train "${model[@]}" "$@" "${common[@]}" > "$OUT/$tag.log" 2>&1
  else
    timeout 120 "$BIN_TRIPOD" launch --nproc-per-node "$n" train "${model[@]}" --distributed-backend "$BACKEND" "$@" \
      "${common[@]}" > "$OUT/$tag.log" 2>&1
  fi
  rc=$?
  note "run $tag ($n rank(s)) rc=$rc $((SECONDS - t0)) s $(grep -o 'mem peak: [0-9.]* MiB' "$OUT/$tag.log" | tail -1) $([[ $rc == 0 ]] || echo FAIL)"
  [[ $rc == 0 ]] || grep -m3 -iE "error|what\(\)" "$OUT/$tag.log" | cut -c1-400 | tee -a "$summary"
}

comm_checks() {
  note "---- bench comm through the staged communicator (ranks share the GPU) ----"
  local n rc ok wrong cases
  for n in 2 4 8; do
    timeout 120 "$BIN_TRIPOD" launch --nproc-per-node $n bench comm --device $DEVICE --distributed-backend gloo \
      --min-bytes 4 --max-bytes 4194304 --step-factor 16 --iters 3 --warmup-iters 1 \
      --distributed-timeout-minutes 1 > "$OUT/comm_$n.log" 2>&1
    rc=$?
    read -r wrong cases < <(awk '{sub(/^\[rank [0-9]+\] */, "")} /^[0-9]/ {w += $NF; n++} END {print w + 0, n + 0}' "$OUT/comm_$n.log")
    verdict "bench comm gloo-staged $n ranks on one GPU: rc=$rc, $cases op x size cases, $wrong wrong elements -> $([[ $rc == 0 && $cases -ge 25 && $wrong == 0 ]] && echo PASS || echo FAIL)"
  done
  if [[ $DEVICE == cuda && $(nvidia-smi -L | wc -l) == 1 ]]; then
    timeout 60 "$BIN_TRIPOD" launch --nproc-per-node 2 train "${model[@]}" --tensor-model-parallel-size 2 --train-iters 2 \
      > "$OUT/nccl_shared.log" 2>&1
    rc=$?
    grep -q -- "--distributed-backend gloo" "$OUT/nccl_shared.log" && [[ $rc != 0 ]] && ok=PASS || ok=FAIL
    verdict "NCCL with 2 ranks on 1 GPU fails naming the rehearsal mode: rc=$rc -> $ok"
    grep -m1 -o "2 ranks on this node[^(]*" "$OUT/nccl_shared.log" | tee -a "$summary"
  fi
}

overhead() {
  note "---- overhead of staging: 2 ranks, all_reduce, us per op (host Gloo | GPU buffers through Gloo) ----"
  local dev extra
  for dev in cpu $DEVICE; do
    extra=(); [[ $dev != cpu ]] && extra=(--distributed-backend gloo)
    timeout 120 "$BIN_TRIPOD" launch --nproc-per-node 2 bench comm --device $dev "${extra[@]}" --ops all_reduce \
      --min-bytes 4096 --max-bytes 67108864 --step-factor 16 --iters 5 --warmup-iters 2 > "$OUT/overhead_$dev.log" 2>&1
    note "  $dev rc=$?: $(awk '{sub(/^\[rank [0-9]+\] */, "")} /^[0-9]/ {printf "%sB %sus; ", $1, $4}' "$OUT/overhead_$dev.log")"
  done
}

fp32_checks() {
  note "---- fp32: each layout on one GPU vs the single-GPU run (30 iterations) ----"
  local name k extra
  run fp32_single 1 --train-iters 30
  for name in "${names[@]}"; do
    has fp32 || [[ $name == tp2pp2dp2 ]] || continue
    extra=(); [[ $name == tp2pp2dp2 ]] && extra=(--save "$OUT/ckpt_8" --save-interval 20)
    # shellcheck disable=SC2086
    run fp32_$name ${layout_n[$name]} ${layout_flags[$name]} --train-iters 30 "${extra[@]}"
    for k in lm_loss grad_norm; do
      verdict "fp32 $name vs single: $(compare "$OUT/fp32_single.jsonl" "$OUT/fp32_$name.jsonl" $k 1e-5 1 20)"
      note "   (reported, not checked) $(compare "$OUT/fp32_single.jsonl" "$OUT/fp32_$name.jsonl" $k 1e-5 1 30)"
    done
  done
  grep -m1 "share" "$OUT/fp32_tp2pp2dp2.log" 2>/dev/null | cut -c1-400 | tee -a "$summary"
  grep -m1 "memory on rank" "$OUT/fp32_tp2pp2dp2.log" 2>/dev/null | cut -c1-400 | tee -a "$summary"
  if has fp32; then  # dropout: the masks must not depend on the layout either
    run fp32_single_dropout 1 --train-iters 20 --hidden-dropout 0.1
    run fp32_tp2_dropout 2 --tensor-model-parallel-size 2 --train-iters 20 --hidden-dropout 0.1
    for k in lm_loss grad_norm; do
      verdict "fp32 tp2 with dropout 0.1 vs single: $(compare "$OUT/fp32_single_dropout.jsonl" "$OUT/fp32_tp2_dropout.jsonl" $k 1e-5 1 20)"
    done
    run fp32_single_llama 1 --train-iters 20 "${llama[@]}"
    run fp32_cp2_llama 2 --context-parallel-size 2 --train-iters 20 "${llama[@]}"
    run fp32_cp2_a2a_llama 2 --context-parallel-size 2 --cp-comm-type a2a --train-iters 20 "${llama[@]}"
    for k in lm_loss grad_norm; do
      verdict "fp32 llama cp2 vs single: $(compare "$OUT/fp32_single_llama.jsonl" "$OUT/fp32_cp2_llama.jsonl" $k 1e-5 1 20)"
      verdict "fp32 llama cp2 a2a vs single: $(compare "$OUT/fp32_single_llama.jsonl" "$OUT/fp32_cp2_a2a_llama.jsonl" $k 1e-5 1 20)"
    done
  fi
}

ckpt_checks() {
  note "---- checkpoint of the 8-rank layout, resumed in one GPU process ----"
  local k
  if [[ -d $OUT/ckpt_8/iter_0000020 ]]; then
    rm -rf "$OUT/ckpt_8/iter_0000030"; echo 20 > "$OUT/ckpt_8/latest_checkpointed_iteration.txt"
    run ckpt_resumed_1gpu 1 --train-iters 30 --load "$OUT/ckpt_8"
    for k in lm_loss grad_norm; do
      verdict "resumed on 1 GPU vs the 8-rank run: $(compare "$OUT/fp32_tp2pp2dp2.jsonl" "$OUT/ckpt_resumed_1gpu.jsonl" $k 1e-5 21 30)"
      note "   vs the single-GPU run (reported) $(compare "$OUT/fp32_single.jsonl" "$OUT/ckpt_resumed_1gpu.jsonl" $k 1e-5 21 30)"
    done
  else
    verdict "checkpoint at iteration 20 missing -> FAIL"
  fi
}

bf16_checks() {
  note "---- bf16: each layout on one GPU vs single-GPU bf16 (50 iterations, lm loss within 1%) ----"
  local name
  run bf16_single 1 --train-iters 50 --bf16
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086
    run bf16_$name ${layout_n[$name]} ${layout_flags[$name]} --train-iters 50 --bf16
    verdict "bf16 $name vs single: $(compare "$OUT/bf16_single.jsonl" "$OUT/bf16_$name.jsonl" lm_loss 0.01 1 50)"
  done
}

# bf16 runs beside the rest (the GPU and the host have room for both; each
# `tripod launch` picks a free port): half the wall time of one lease.
t_start=$SECONDS
if has bf16; then (summary="$OUT/summary_bf16.txt"; : > "$summary"; bf16_checks > /dev/null) & bf16_pid=$!; fi
has comm && comm_checks
{ has fp32 || has ckpt; } && fp32_checks
has ckpt && ckpt_checks
if has bf16; then wait $bf16_pid; cat "$OUT/summary_bf16.txt" >> "$summary"; cat "$OUT/summary_bf16.txt"; fi
has comm && overhead
fails=$(grep -c "FAIL" "$summary")
note "---- $fails check(s) failed; $((SECONDS - t_start)) s ----"
# At most 8 files come back from some GPU hosts: keep summary.txt loose, pack the rest.
(cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude=summary.txt --exclude='ckpt_*' \
   $(ls | grep -vE '^(logs.tar.gz|summary.txt|ckpt_.*)$') && \
   ls | grep -vE '^(logs.tar.gz|summary.txt)$' | xargs rm -rf)
exit $((fails > 0))
