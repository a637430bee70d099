#!/usr/bin/env bash
# Same numbers, same speed: runs one set of training jobs with two builds of
# tripod on one GPU and compares them. For a change that must not move any
# number (a refactor, a new option left off), the losses and gradient norms
# must be identical at every iteration, and the speed equal within noise.
#
#   scripts/gpu_compare_builds.sh --before DIR_A --after DIR_B
#
# DIR_A / DIR_B are folders written by `scripts/gpu_check.sh --stage DIR`
# (STAGE_TARGETS=tripod is enough). Logs, metrics and summary.txt go to $OUT
# (default ./gpu_compare_out). Jobs (all on mock data, --log-interval 1):
#   fp32_small    2 layers, hidden 128, 50 iterations
#   fp16_small    the same in fp16 with dynamic loss scaling and a forced overflow
#   bf16_llama    a small Llama (RMSNorm, RoPE, SwiGLU, GQA, untied), full recompute
#   layout_4rank  TP2 x PP2 (SP, interleaved, distributed optimizer, overlap) as
#                 4 ranks sharing the GPU through Gloo, bf16
#   speed_124m    GPT-2 124M bf16, seq 1024, micro-batch 64, 40 iterations
#   speed_llama1b Llama ~1B (16 x 2048, 32 heads, 8 groups, ffn 5632, seq 2048),
#                 bf16, micro-batch 4, 40 iterations
# The numbers jobs run with --deterministic-mode (cuDNN's atomics-free dQ), so
# two runs of one build agree bit for bit. The speed jobs run before, after,
# before, after; tokens/s is the mean of iterations 11-40 of each run.
set -uo pipefail
cd "$(dirname "$0")/.."
before=""; after=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --before) before="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu_compare_builds.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $before && -n $after ]] || { echo "gpu_compare_builds.sh: pass --before DIR and --after DIR" >&2; exit 2; }

OUT=${OUT:-$PWD/gpu_compare_out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
source scripts/stage_env.sh
note "gpu_compare_builds: $(date -u +%Y-%m-%dT%H:%MZ) host=$(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
use_stage "$before" /tmp/tripod_before; BIN_A=$BIN_TRIPOD
use_stage "$after" /tmp/tripod_after; BIN_B=$BIN_TRIPOD

small=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --mock-data --vocab-size 1024
       --micro-batch-size 4 --global-batch-size 8 --train-iters 50 --lr 1e-3 --lr-warmup-iters 5
       --log-interval 1 --eval-interval 0 --seed 1234 --device cuda --deterministic-mode)
llama=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --group-query-attention --num-query-groups 2
       --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights
       --disable-bias-linear --seq-length 256 --mock-data --vocab-size 2048 --micro-batch-size 4
       --global-batch-size 8 --train-iters 30 --lr 3e-4 --log-interval 1 --eval-interval 0 --device cuda
       --deterministic-mode)
layout=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel
        --num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer --overlap-grad-reduce
        --overlap-param-gather --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128
        --mock-data --vocab-size 1024 --micro-batch-size 2 --global-batch-size 16 --train-iters 20 --lr 1e-3
        --log-interval 1 --eval-interval 0 --bf16 --device cuda --distributed-backend gloo --deterministic-mode)

# run NAME BIN ARGS...: one job; metrics in $OUT/NAME.jsonl
run() {
  local name=$1 bin=$2; shift 2
  rm -f "$OUT/$name.jsonl"
  timeout 600 "$bin" "$@" --metrics-file "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
  local rc=$?
  ((rc == 0)) || { note "$name rc=$rc"; tail -5 "$OUT/$name.log" | tee -a "$summary"; }
}
# same NAME: lm_loss and grad_norm of NAME_before vs NAME_after at every iteration
same() {
  python3 - "$OUT/$1_before.jsonl" "$OUT/$1_after.jsonl" "$1" <<'PY' | tee -a "$summary"
import json, sys
def rows(p):
    try: return {r["iteration"]: r for r in map(json.loads, open(p)) if "lm_loss" in r}
    except FileNotFoundError: return {}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
its = sorted(set(a) & set(b))
keys = ("lm_loss", "grad_norm", "loss_scale")
diff = [(i, k, a[i][k], b[i][k]) for i in its for k in keys if k in a[i] and a[i].get(k) != b[i].get(k)]
last = a[its[-1]]["lm_loss"] if its else None
verdict = "IDENTICAL" if its and len(its) == len(a) == len(b) and not diff else "DIFFERENT"
print(f"{sys.argv[3]}: {len(its)} iterations ({len(a)} before, {len(b)} after), {len(diff)} differing values, "
      f"final lm_loss {last} -> {verdict}" + (f"; first: iteration {diff[0][0]} {diff[0][1]} {diff[0][2]} vs {diff[0][3]}" if diff else ""))
PY
}
# speed NAME: mean tokens/s of iterations 11-40
speed() {
  python3 - "$OUT/$1.jsonl" <<'PY'
import json, sys
try: r = [x for x in map(json.loads, open(sys.argv[1])) if x.get("iteration", 0) > 10 and "tokens_per_sec" in x]
except FileNotFoundError: r = []
if not r: print("no data"); sys.exit()
ms = sum(x["elapsed_ms"] for x in r) / len(r)
tps = sum(x["tokens_per_sec"] * x["elapsed_ms"] for x in r) / len(r) / ms
print(f"{tps:.0f} tokens/s ({ms:.1f} ms/iter, MFU {100 * r[-1]['mfu']:.1f}%, peak {r[-1].get('mem_peak_bytes', 0) / 2**20:.0f} MiB)")
PY
}

note "---- numbers: identical losses, grad norms and loss scales ----"
for tag in before after; do
  bin=$BIN_A; [[ $tag == after ]] && bin=$BIN_B
  run fp32_small_$tag "$bin" train "${small[@]}"
  run fp16_small_$tag "$bin" train "${small[@]}" --fp16 --inject-grad-overflow-at 20
  run bf16_llama_$tag "$bin" train "${llama[@]}" --bf16 --recompute-granularity full
  run layout_4rank_$tag "$bin" launch --nproc-per-node 4 train "${layout[@]}"
done
for n in fp32_small fp16_small bf16_llama layout_4rank; do same $n; done

note "---- speed: before, after, before, after ----"
s124=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --mock-data --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --train-iters 40 --lr 1e-4
      --log-interval 1 --eval-interval 0 --bf16 --device cuda)
s1b=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
     --ffn-hidden-size 5632 --position-embedding-type rope --normalization RMSNorm --swiglu
     --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 2048 --mock-data --vocab-size 32000
     --micro-batch-size 4 --global-batch-size 4 --train-iters 40 --lr 1e-4 --log-interval 1 --eval-interval 0
     --bf16 --device cuda)
for round in 1 2; do
  for tag in before after; do
    bin=$BIN_A; [[ $tag == after ]] && bin=$BIN_B
    run speed_124m_${tag}_$round "$bin" train "${s124[@]}"
    note "speed 124m $tag round $round: $(speed speed_124m_${tag}_$round)"
    run speed_llama1b_${tag}_$round "$bin" train "${s1b[@]}"
    note "speed llama1b $tag round $round: $(speed speed_llama1b_${tag}_$round)"
  done
done
