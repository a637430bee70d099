#!/usr/bin/env bash
# Per-rank peak memory of each --data-parallel-sharding-strategy on GPU
# kernels against `tripod plan` (docs/zero.md, "Memory"), with ONE GPU:
# ranks share the GPU over the host-staged Gloo communicator, started by
# `tripod launch`; each rank's caching allocator reports its own peak
# ("allocator peak X MiB"). Logs and a summary go to $OUT (default:
# ./gpu_zero_mem_out). Under 3 minutes on one H200.
#
#   STAGE_TARGETS=tripod scripts/gpu_check.sh --stage DIR   (build machine, build-cuda)
#   scripts/gpu_zero_mem_check.sh --prebuilt DIR            (GPU machine)
#   scripts/gpu_zero_mem_check.sh --tripod BIN              (a tripod binary built here)
# ZERO_DEVICE=cpu runs the same checks on the CPU backend (a dry run without a GPU).
#  peaks  GPT-2 124M shape (seq 512, micro-batch 2, bf16), no_shard, optim,
#         optim_grads and optim_grads_params (and ZeRO-3 with the prefetch)
#         at dp2 and dp4: the largest rank's allocator peak within 10% of
#         the plan's allocator_peak for the same flags (--device cuda, or
#         cpu with ZERO_DEVICE=cpu)
#  order  ZeRO-3's measured peak below optim's at dp4 (what the strategy is for)
# Exit status: the number of FAIL lines (0: all passed).
set -uo pipefail
cd "$(dirname "$0")/.."

source scripts/stage_env.sh
gpu_check_args gpu_zero_mem_check 19 "$@"
gpu_check_unknown "${EXTRA_ARGS[@]}"
gpu_check_open
DEVICE=${ZERO_DEVICE:-cuda}
export NCCL_NVLS_ENABLE=0  # shared GPU hosts: NVLink multicast off

shape=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 512 --vocab-size 50257
       --micro-batch-size 2 --bf16)
[[ $DEVICE == cpu ]] && shape=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128
                               --vocab-size 2000 --micro-batch-size 2)  # the CPU backend trains fp32
precision=--bf16
[[ $DEVICE == cpu ]] && precision=--fp32

# measure TAG NPROC FLAGS...: the largest rank's allocator peak (MiB) against the plan's.
measure() {
  local tag=$1 n=$2; shift 2
  local gbs=$((2 * n)) t0=$SECONDS rc
  timeout 150 "$BIN_TRIPOD" launch --nproc-per-node "$n" train "${shape[@]}" --global-batch-size $gbs --mock-data \
    --train-iters 2 --log-interval 1 --eval-interval 0 --device $DEVICE --distributed-backend gloo \
    --distributed-timeout-minutes 1 "$@" > "$OUT/$tag.log" 2>&1
  rc=$?
  if [[ $rc != 0 ]]; then
    note "$tag: run rc=$rc FAIL"; grep -m3 -iE "error|what\(\)" "$OUT/$tag.log" | cut -c1-400 | tee -a "$summary"; return
  fi
  local got plan_flags want
  got=$(grep -o "allocator peak [0-9.]* MiB" "$OUT/$tag.log" | awk '{print $3}' | sort -g | tail -1)
  plan_flags=("$@"); plan_flags=("${plan_flags[@]/--overlap-grad-reduce/}")
  "$BIN_TRIPOD" plan "${shape[@]}" $precision --global-batch-size $gbs --gpus-per-node "$n" \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --recompute-search none --op-times assumed \
    --device $DEVICE ${plan_flags[@]} --json > "$OUT/$tag.plan.json" 2>&1
  want=$(python3 -c "import json,sys;t=open(sys.argv[1]).read();j=json.loads(t[t.find('{\n'):]);print(j['layouts'][0]['memory_gib']['allocator_peak']*1024)" "$OUT/$tag.plan.json" 2>/dev/null)
  if [[ -z $got || -z $want ]]; then note "$tag: no peak (measured '$got', plan '$want') FAIL"; return; fi
  local verdict
  verdict=$(python3 -c "g,w=$got,$want;print(f'measured {g:.1f} MiB, predicted {w:.1f} MiB, {100*(w/g-1):+.1f}% -> '+('PASS' if abs(w/g-1)<=0.10 else 'FAIL'))")
  note "$tag ($((SECONDS - t0)) s): $verdict"
  echo "$got" > "$OUT/$tag.peak"
}

note "---- peaks: each strategy, the largest rank against the plan ----"
for n in 2 4; do
  for s in no_shard optim optim_grads optim_grads_params; do
    measure "dp${n}_$s" $n --data-parallel-sharding-strategy $s
  done
done
measure dp4_zero3_prefetch 4 --data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce \
  --overlap-param-gather

note "---- order ----"
if [[ -f $OUT/dp4_optim.peak && -f $OUT/dp4_optim_grads_params.peak ]]; then
  a=$(cat "$OUT/dp4_optim.peak"); b=$(cat "$OUT/dp4_optim_grads_params.peak")
  note "dp4 optim_grads_params $b MiB < optim $a MiB -> $(python3 -c "print('PASS' if $b < $a else 'FAIL')")"
else
  note "order: missing peaks FAIL"
fi

fails=$(grep -c "FAIL" "$summary")
note "gpu_zero_mem_check: $fails FAIL line(s) -> $([[ $fails == 0 ]] && echo PASS || echo FAIL)"
exit "$fails"
