#!/usr/bin/env bash
# Llama-family checks on a GPU machine (issue 19), with a tripod built
# elsewhere (scripts/gpu_check.sh --stage DIR) or here:
#   1. Hugging Face: scripts/llama_hf_check.py (random LlamaForCausalLM
#      import, tripod-trained export; logits and greedy continuation against
#      transformers). Needs torch and transformers.
#   2. Whole model, fp32, GPU vs CPU: 50 iterations of a small Llama config
#      (GQA, RoPE, RMSNorm, SwiGLU, untied, no bias), lm loss and grad norm
#      within 1e-4.
#   3. Speed: the Llama ~1B shape (16 layers, hidden 2048, 32 heads, 8 query
#      groups, ffn 5632, seq 2048, vocab 32000, micro-batch 4) bf16 with
#      tripod, then bench/torch_llama_bench.py (PyTorch compile + SDPA) in the
#      same lease: tokens/s and MFU for bench/RESULTS.md.
#
# usage: scripts/gpu_llama_check.sh (--stage DIR | --tripod BIN) [--out DIR] [--checks "hf parity speed"]
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; BIN_TRIPOD=""; OUT=${OUT:-gpu_llama_out}; checks="hf parity speed"
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --tripod) BIN_TRIPOD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --checks) checks=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
mkdir -p "$OUT"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $checks " == *" $1 "* ]]; }
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_llama_stage"
fi
[[ -x $BIN_TRIPOD ]] || { note "no tripod binary (pass --stage DIR or --tripod BIN)"; exit 2; }
source scripts/gpu_train_check.sh  # compare_metrics
LLAMA=(--group-query-attention --position-embedding-type rope --normalization RMSNorm --swiglu
       --untie-embeddings-and-output-weights --disable-bias-linear)

if has hf; then
  note "---- Hugging Face LlamaForCausalLM import/export ----"
  python3 scripts/llama_hf_check.py "$BIN_TRIPOD" "$OUT/hf" > "$OUT/hf.log" 2>&1; rc=$?
  grep -E "^(PASS|FAIL|ALL PASS|FAILED)" "$OUT/hf.log" | tee -a "$summary"
  note "llama_hf_check rc=$rc"
fi

if has parity; then
  note "---- Llama whole model: fp32 GPU vs CPU (50 iterations, mock data) ----"
  small=(--num-layers 2 --hidden-size 256 --num-attention-heads 8 --num-query-groups 2 --ffn-hidden-size 512
         --seq-length 128 --mock-data --vocab-size 1024 --micro-batch-size 4 --global-batch-size 8 --train-iters 50
         --lr 1e-3 --lr-warmup-iters 5 --log-interval 1 --eval-interval 0 --seed 1234 "${LLAMA[@]}")
  OMP_NUM_THREADS=$(nproc) timeout 300 "$BIN_TRIPOD" train --device cpu "${small[@]}" \
    --metrics-file "$OUT/llama_cpu.jsonl" > "$OUT/llama_cpu.log" 2>&1; note "cpu fp32 rc=$?"
  timeout 300 "$BIN_TRIPOD" train --device cuda "${small[@]}" --metrics-file "$OUT/llama_gpu.jsonl" \
    > "$OUT/llama_gpu.log" 2>&1; note "cuda fp32 rc=$?"
  timeout 300 "$BIN_TRIPOD" train --device cuda "${small[@]}" --recompute-granularity full \
    --metrics-file "$OUT/llama_gpu_full.jsonl" > "$OUT/llama_gpu_full.log" 2>&1; note "cuda fp32 recompute full rc=$?"
  for k in lm_loss grad_norm; do
    note "llama gpu vs cpu fp32 $(compare_metrics "$OUT/llama_cpu.jsonl" "$OUT/llama_gpu.jsonl" $k 1e-4)"
    note "llama gpu recompute full vs cpu $(compare_metrics "$OUT/llama_cpu.jsonl" "$OUT/llama_gpu_full.jsonl" $k 1e-4)"
  done
fi

if has speed; then
  note "---- Llama ~1B speed, bf16, seq 2048, micro-batch 4 (mean of iterations 11-40) ----"
  shape=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632
         --seq-length 2048 --vocab-size 32000)
  timeout 600 "$BIN_TRIPOD" train --device cuda --bf16 "${shape[@]}" "${LLAMA[@]}" --mock-data \
    --micro-batch-size 4 --global-batch-size 4 --train-iters 40 --log-interval 10 --eval-interval 0 --lr 1e-4 \
    --metrics-file "$OUT/speed_llama1b.jsonl" > "$OUT/speed_llama1b.log" 2>&1
  note "tripod llama 1b rc=$? $(python3 - "$OUT/speed_llama1b.jsonl" <<'PY' 2>&1
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if x["iteration"] > 10]
ms = sum(x["elapsed_ms"] for x in r) / len(r)
tps = sum(x["tokens_per_sec"] * x["elapsed_ms"] for x in r) / len(r) / ms
mfu = r[-1]["mfu"] * tps / r[-1]["tokens_per_sec"] if r[-1].get("mfu") else float("nan")
print(f"{tps:,.0f} tok/s  MFU {100 * mfu:.1f}%  ({len(r) * 10} iterations)")
PY
)"
  grep -m1 "memory on rank 0" "$OUT/speed_llama1b.log" | tee -a "$summary"
  timeout 900 python3 bench/torch_llama_bench.py 16 2048 32 8 5632 4 2048 32000 40 > "$OUT/torch_llama1b.log" 2>&1
  note "torch llama 1b rc=$? $(tail -1 "$OUT/torch_llama1b.log")"
fi
tail -40 "$summary"
