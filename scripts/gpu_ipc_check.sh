#!/usr/bin/env bash
# IPC collectives (TRIPOD_IPC_COLLECTIVES=1, NOTE [IPC collectives]) for ranks
# that share ONE GPU, against the host-staged Gloo path they replace. Logs,
# metrics and a summary go to $OUT (default: ./gpu_ipc_out). Under 4 minutes
# on one H200.
#
#   STAGE_TARGETS=tripod scripts/gpu_check.sh --stage DIR   (build machine, build-cuda)
#   scripts/gpu_ipc_check.sh --prebuilt DIR                 (GPU machine)
#   scripts/gpu_ipc_check.sh --tripod BIN                   (a tripod binary built here)
#  check      `bench comm --check --device cuda --distributed-backend gloo` with
#             IPC: 2 ranks, and 4 ranks as tp2 x pp2, every collective on every
#             group against analytic values
#  bench      all_reduce bus bandwidth, 2 ranks on the GPU, staged vs IPC
#  rehearsal  the seed guide's job (24 layers, hidden 1024, 16 heads, seq 1024,
#             TP2, micro-batch 4 x 4 = 16 sequences, bf16), 2 ranks sharing the
#             GPU, 6 iterations, staged vs IPC: lm loss and grad norm bit for
#             bit (every group has 2 ranks), and the time per iteration after
#             the first (the target: IPC at least 5x faster)
# Exit status: the number of FAIL lines (0: all passed).
set -uo pipefail
cd "$(dirname "$0")/.."

source scripts/stage_env.sh
gpu_check_args gpu_ipc_check 19 "$@"
gpu_check_unknown "${EXTRA_ARGS[@]}"
gpu_check_open

step() {  # step TAG RC
  note "$1 rc=$2 $([[ $2 == 0 ]] || echo FAIL)"
  [[ $2 == 0 ]] || grep -m3 -iE "error|what\(\)" "$OUT/$1.log" | cut -c1-400 | tee -a "$summary"
}

note "---- check: every collective on every group, ranks sharing the GPU, IPC ----"
TRIPOD_IPC_COLLECTIVES=1 timeout 120 "$BIN_TRIPOD" launch --nproc-per-node 2 -- bench comm --check --device cuda \
  --distributed-backend gloo > "$OUT/check2.log" 2>&1
step check2 $?
TRIPOD_IPC_COLLECTIVES=1 timeout 120 "$BIN_TRIPOD" launch --nproc-per-node 4 -- bench comm --check --device cuda \
  --distributed-backend gloo --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 > "$OUT/check4.log" 2>&1
step check4 $?
grep -h "comm check passed" "$OUT"/check*.log | cut -c1-200 | tee -a "$summary"
grep -q "collectives through shared memory" <(TRIPOD_IPC_COLLECTIVES=1 timeout 60 "$BIN_TRIPOD" launch \
  --nproc-per-node 2 -- bench comm --device cuda --distributed-backend gloo --ops all_reduce --max-bytes 1024 \
  --iters 1 2>&1) && note "ipc in use: yes" || note "ipc in use: no FAIL"

note "---- bench: all_reduce, 2 ranks on the GPU ----"
for ipc in 0 1; do
  TRIPOD_IPC_COLLECTIVES=$ipc timeout 120 "$BIN_TRIPOD" launch --nproc-per-node 2 -- bench comm --device cuda \
    --distributed-backend gloo --ops all_reduce --min-bytes 1048576 --max-bytes 67108864 --iters 10 \
    > "$OUT/bench$ipc.log" 2>&1
  step "bench$ipc" $?
  note "ipc=$ipc"; grep -E "^\[rank 0\] +[0-9]" "$OUT/bench$ipc.log" | tee -a "$summary"
done

note "---- rehearsal: the seed job, TP2, 2 ranks sharing the GPU ----"
model=(--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024
       --mock-data --vocab-size 50257 --micro-batch-size 4 --global-batch-size 16 --lr 1.5e-4 --train-iters 6
       --log-interval 1 --eval-iters 0 --bf16 --tensor-model-parallel-size 2 --device cuda
       --distributed-backend gloo --seed 3 --distributed-timeout-minutes 3)
for ipc in 0 1; do
  t0=$SECONDS
  TRIPOD_IPC_COLLECTIVES=$ipc timeout 240 "$BIN_TRIPOD" launch --nproc-per-node 2 -- train "${model[@]}" \
    --metrics-file "$OUT/rehearsal$ipc.jsonl" > "$OUT/rehearsal$ipc.log" 2>&1
  step "rehearsal$ipc" $?
  note "rehearsal ipc=$ipc: $((SECONDS - t0)) s wall"
done
python3 - "$OUT/rehearsal0.jsonl" "$OUT/rehearsal1.jsonl" <<'PY' | tee -a "$summary"
import json, sys
def rows(p):
    try: return [r for r in map(json.loads, open(p)) if "lm_loss" in r and "elapsed_ms" in r]
    except OSError: return []
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if len(a) < 3 or len(b) < 3: print("rehearsal: missing iterations FAIL"); sys.exit()
same = all(x["lm_loss"] == y["lm_loss"] and x.get("grad_norm") == y.get("grad_norm") for x, y in zip(a, b))
print(f"rehearsal losses and grad norms bit for bit: {'yes' if same else 'no FAIL'}")
ta = sum(r["elapsed_ms"] for r in a[1:]) / (len(a) - 1); tb = sum(r["elapsed_ms"] for r in b[1:]) / (len(b) - 1)
print(f"rehearsal ms/iteration: staged {ta:.0f}, IPC {tb:.0f}, speedup {ta / tb:.1f}x {'' if ta / tb >= 5 else '(below the 5x target)'}")
PY
fails=$(grep -c "FAIL" "$summary")
note "gpu_ipc_check: $fails FAIL line(s)"
exit "$fails"
