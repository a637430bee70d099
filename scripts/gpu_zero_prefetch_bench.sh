#!/usr/bin/env bash
# ZeRO-3's prefetch (docs/zero.md): the step time with the next layer's
# all-gather in flight (--overlap-param-gather) against gathering each layer
# when it is reached, with ONE GPU: ranks share it over the host-staged Gloo
# communicator (its worker thread moves the bytes while the GPU computes),
# started by `tripod launch`. ZeRO-2 and `optim` at the same dp give the
# reference without parameter gathers. Logs and a summary go to $OUT
# (default ./gpu_zero_prefetch_out). Under 4 minutes on one H200.
#
#   STAGE_TARGETS=tripod scripts/gpu_check.sh --stage DIR      (build machine, build-cuda)
#   scripts/gpu_zero_prefetch_bench.sh --prebuilt DIR          (GPU machine)
#   scripts/gpu_zero_prefetch_bench.sh --tripod BIN            (a tripod binary built here)
# ZERO_DEVICE=cpu runs the same runs on the CPU backend (a smaller model, fp32).
#  GPT-2 124M shape (seq 1024, micro-batch 4, bf16), 2 micro-batches per rank
#  a step, 12 iterations: the mean iteration time of iterations 4-12 (the
#  largest rank's, as logged) for optim, optim_grads, and optim_grads_params
#  with and without the prefetch, at dp2 and dp4; the prefetch's saving.
#  Also checks that the two ZeRO-3 runs log the same losses within 1e-4 (the
#  prefetch moves when bytes travel, not what is computed; on the GPU two
#  runs without --deterministic-mode differ in the last bits: cuDNN's dQ and
#  the embedding gradient sum with atomics).
# Exit status: the number of FAIL lines (0: all ran).
set -uo pipefail
cd "$(dirname "$0")/.."

source scripts/stage_env.sh
source scripts/gpu_train_check.sh  # compare_metrics
gpu_check_args gpu_zero_prefetch 21 "$@"
gpu_check_unknown "${EXTRA_ARGS[@]}"
gpu_check_open
DEVICE=${ZERO_DEVICE:-cuda}
export NCCL_NVLS_ENABLE=0  # shared GPU hosts: NVLink multicast off
ITERS=${ZERO_ITERS:-12}

mbs=4
shape=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --vocab-size 50257 --bf16)
[[ $DEVICE == cpu ]] && mbs=2 && shape=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128
                                        --vocab-size 1000)
shape+=(--micro-batch-size $mbs)

# time TAG NPROC FLAGS...: mean iteration ms over iterations 4..ITERS (the slowest rank's log).
time_run() {
  local tag=$1 n=$2; shift 2
  local gbs=$((2 * mbs * n)) t0=$SECONDS rc
  timeout 200 "$BIN_TRIPOD" launch --nproc-per-node "$n" train "${shape[@]}" --global-batch-size $gbs --mock-data \
    --train-iters "$ITERS" --log-interval 1 --eval-interval 0 --device $DEVICE --distributed-backend gloo \
    --distributed-timeout-minutes 2 --seed 11 --metrics-file "$OUT/$tag.jsonl" "$@" > "$OUT/$tag.log" 2>&1
  rc=$?
  if [[ $rc != 0 ]]; then
    note "$tag: run rc=$rc FAIL"; grep -m3 -iE "error|what\(\)" "$OUT/$tag.log" | cut -c1-400 | tee -a "$summary"; return
  fi
  local ms
  ms=$(python3 - "$OUT/$tag.jsonl" <<'PY'
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if x["iteration"] >= 4]
print(f"{sum(x['elapsed_ms'] for x in r) / len(r):.1f}")
PY
)
  echo "$ms" > "$OUT/$tag.ms"
  note "$tag ($((SECONDS - t0)) s wall): $ms ms per iteration"
}

for n in 2 4; do
  note "---- dp$n ----"
  time_run "dp${n}_optim" $n --data-parallel-sharding-strategy optim --overlap-grad-reduce
  time_run "dp${n}_zero2" $n --data-parallel-sharding-strategy optim_grads --overlap-grad-reduce
  time_run "dp${n}_zero3_noprefetch" $n --data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce
  time_run "dp${n}_zero3_prefetch" $n --data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce \
    --overlap-param-gather
  a="$OUT/dp${n}_zero3_noprefetch"; b="$OUT/dp${n}_zero3_prefetch"
  if [[ -f $a.ms && -f $b.ms ]]; then
    note "dp$n ZeRO-3 prefetch: $(cat "$b.ms") ms against $(cat "$a.ms") ms without," \
      "$(python3 -c "print(f'step time {100 * ($(cat "$b.ms") / $(cat "$a.ms") - 1):+.1f}% with the prefetch')")"
    note "dp$n ZeRO-3 losses with and without the prefetch: $(compare_metrics "$a.jsonl" "$b.jsonl" lm_loss 1e-4)"
  fi
done

fails=$(grep -c "FAIL" "$summary")
note "gpu_zero_prefetch_bench: $fails FAIL line(s) -> $([[ $fails == 0 ]] && echo PASS || echo FAIL)"
exit "$fails"
