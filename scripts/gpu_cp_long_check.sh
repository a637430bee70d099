#!/usr/bin/env bash
# Long sequences under context parallelism on ONE GPU (ranks share it over
# the host-staged Gloo communicator, each rank's allocator capped at its
# share): per-rank memory against `tripod plan`, and the ring's overlap.
# Logs and a summary go to $OUT (default: ./gpu_cp_long_out). About 5
# minutes on one H200.
#
#   STAGE_TARGETS=tripod scripts/gpu_check.sh --stage DIR   (build machine, build-cuda)
#   scripts/gpu_cp_long_check.sh --prebuilt DIR             (GPU machine)
#   scripts/gpu_cp_long_check.sh --tripod BIN               (a tripod binary built here)
#  memory   the Llama ~1B shape (16 x 2048, 32 heads, 8 groups, ffn 5632,
#           vocab 32000, bf16, distributed optimizer) at seq 32768 with CP2
#           and CP4 and at seq 65536 with CP4 (full recompute), 2
#           iterations: the largest rank's allocator peak within 10% of the
#           plan's allocator_peak for the same flags
#  overlap  `tripod bench cp` at the Llama 3 8B attention shape (32 heads
#           of 128, 8 groups), CP2, seq 8192 and 32768: the ring overlapped
#           and serialized (same out and dqkv), its block attention and its
#           passes alone, a2a and all_gather; recorded as measured (ranks
#           sharing a GPU split its SMs, so this bounds the overlap a
#           two-GPU run gets rather than measuring it)
# Exit status: the number of FAIL lines (0: all passed).
set -uo pipefail
cd "$(dirname "$0")/.."

source scripts/stage_env.sh
gpu_check_args gpu_cp_long_check 22 "$@"
gpu_check_unknown "${EXTRA_ARGS[@]}"
gpu_check_open

shape=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
       --ffn-hidden-size 5632 --vocab-size 32000 --position-embedding-type rope --normalization RMSNorm --swiglu
       --untie-embeddings-and-output-weights --disable-bias-linear --bf16 --micro-batch-size 1
       --use-distributed-optimizer)

# measure TAG CP SEQ RECOMPUTE FLAGS...: the largest rank's allocator peak (MiB) against the plan's.
measure() {
  local tag=$1 cp=$2 seq=$3 recompute=$4; shift 4
  local t0=$SECONDS rc got want verdict
  timeout 420 "$BIN_TRIPOD" launch --nproc-per-node "$cp" train "${shape[@]}" --seq-length "$seq" \
    --max-position-embeddings "$seq" --context-parallel-size "$cp" --global-batch-size 1 --mock-data \
    --train-iters 2 --log-interval 1 --eval-interval 0 --device cuda --distributed-backend gloo \
    --distributed-timeout-minutes 5 "$@" > "$OUT/$tag.log" 2>&1
  rc=$?
  "$BIN_TRIPOD" plan "${shape[@]}" --seq-length "$seq" --global-batch-size 1 --gpus-per-node "$cp" \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --context-parallel-size "$cp" \
    --recompute-search "$recompute" --op-times assumed --device cuda "$@" --json > "$OUT/$tag.plan.json" 2>&1
  want=$(python3 -c "import json,sys;t=open(sys.argv[1]).read();j=json.loads(t[t.find('{\n'):]);print(j['layouts'][0]['memory_gib']['allocator_peak']*1024)" "$OUT/$tag.plan.json" 2>/dev/null)
  if [[ $rc != 0 ]]; then
    note "$tag: run rc=$rc (plan: ${want:-?} MiB per rank) FAIL"
    grep -m3 -iE "error|what\(\)|out of memory" "$OUT/$tag.log" | cut -c1-400 | tee -a "$summary"; return
  fi
  got=$(grep -o "allocator peak [0-9.]* MiB" "$OUT/$tag.log" | awk '{print $3}' | sort -g | tail -1)
  if [[ -z $got || -z $want ]]; then note "$tag: no peak (measured '$got', plan '$want') FAIL"; return; fi
  verdict=$(python3 -c "g,w=$got,$want;print(f'measured {g:.0f} MiB, predicted {w:.0f} MiB, {100*(w/g-1):+.1f}% -> '+('PASS' if abs(w/g-1)<=0.10 else 'FAIL'))")
  note "$tag ($((SECONDS - t0)) s): $verdict"
}

note "---- memory: Llama ~1B, long sequences, the largest rank against the plan ----"
measure seq32k_cp2 2 32768 none
measure seq32k_cp4 4 32768 none
measure seq64k_cp4 4 65536 full --recompute-granularity full

note "---- overlap: tripod bench cp, Llama 3 8B attention, CP2 ----"
for seq in 8192 32768; do
  timeout 240 "$BIN_TRIPOD" launch --nproc-per-node 2 bench cp --device cuda --distributed-backend gloo \
    --seq-length $seq --num-attention-heads 32 --num-query-groups 8 --kv-channels 128 --iters 5 \
    > "$OUT/bench_cp_$seq.log" 2>&1
  rc=$?
  grep -E "^\[rank 0\] ( |# )" "$OUT/bench_cp_$seq.log" | sed 's/^\[rank 0\] //' | tee -a "$summary"
  if [[ $rc == 0 ]] && grep -q "give the same out and dqkv: yes" "$OUT/bench_cp_$seq.log"; then
    note "bench cp seq $seq -> PASS"
  else
    note "bench cp seq $seq rc=$rc -> FAIL"
  fi
done

fails=$(grep -c "FAIL" "$summary")
note "gpu_cp_long_check: $fails FAIL line(s) -> $([[ $fails == 0 ]] && echo PASS || echo FAIL)"
exit "$fails"
