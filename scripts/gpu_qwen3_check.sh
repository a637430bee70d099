#!/usr/bin/env bash
# --qk-layernorm and the Qwen3 / sharded Hugging Face interop on the GPU
# machine (it has torch and transformers), with a tripod built elsewhere
# (scripts/gpu_check.sh --stage DIR) or here:
#   1. scripts/llama_hf_check.py: random LlamaForCausalLM and
#      Qwen3ForCausalLM saved with save_pretrained in shards and imported;
#      tripod-trained Llama and Qwen3 (--qk-layernorm, exported in shards)
#      loaded by transformers: logits within 1e-4 and the same greedy ids
#      (`tripod generate` on the GPU: the q/k norm's gathers and norms in CUDA).
#   2. scripts/hf_moe_check.py: the same for Mixtral, Qwen2-MoE and
#      Qwen3MoeForCausalLM (tripod on the CPU: the CUDA backend has no MoE ops).
#   3. --qk-layernorm whole model, fp32, GPU vs CPU, 30 iterations: Llama
#      (RMSNorm q/k norms) and GPT-2 (LayerNorm with biases), and the Llama
#      one with --recompute-granularity full; lm loss and grad norm within 1e-4.
# About two minutes on one H200.
#
# usage: scripts/gpu_qwen3_check.sh (--stage DIR | --tripod BIN) [--out DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; BIN_TRIPOD=""; OUT=${OUT:-gpu_qwen3_out}
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --tripod) BIN_TRIPOD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
mkdir -p "$OUT"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_qwen3_stage"
fi
[[ -x $BIN_TRIPOD ]] || { note "no tripod binary (pass --stage DIR or --tripod BIN)"; exit 2; }
source scripts/gpu_train_check.sh  # compare_metrics
fail=0
note "transformers $(python3 -c 'import transformers; print(transformers.__version__)' 2>&1 | tail -1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"

note "---- Hugging Face Llama / Qwen3 (sharded folders) ----"
OMP_NUM_THREADS=$(nproc) timeout 300 python3 scripts/llama_hf_check.py "$BIN_TRIPOD" "$OUT/hf_llama" \
  > "$OUT/hf_llama.log" 2>&1; rc=$?
grep -E "^(PASS|FAIL|ALL PASS|FAILED)" "$OUT/hf_llama.log" | tee -a "$summary"
[[ $rc -eq 0 ]] || { tail -30 "$OUT/hf_llama.log" | tee -a "$summary"; fail=1; }

note "---- Hugging Face Mixtral / Qwen2-MoE / Qwen3-MoE (sharded folders) ----"
OMP_NUM_THREADS=$(nproc) timeout 300 python3 scripts/hf_moe_check.py "$BIN_TRIPOD" "$OUT/hf_moe" \
  > "$OUT/hf_moe.log" 2>&1; rc=$?
grep -E "^(PASS|FAIL|ALL PASS|FAILED)" "$OUT/hf_moe.log" | tee -a "$summary"
[[ $rc -eq 0 ]] || { tail -30 "$OUT/hf_moe.log" | tee -a "$summary"; fail=1; }

note "---- --qk-layernorm whole model: fp32 GPU vs CPU (30 iterations, mock data) ----"
small=(--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --mock-data --vocab-size 1024
       --micro-batch-size 4 --global-batch-size 8 --train-iters 30 --lr 1e-3 --lr-warmup-iters 5 --log-interval 1
       --eval-interval 0 --seed 1234 --qk-layernorm)
llama=(--group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu
       --ffn-hidden-size 512 --untie-embeddings-and-output-weights --disable-bias-linear)
for kind in llama gpt2; do
  extra=(); [[ $kind == llama ]] && extra=("${llama[@]}")
  OMP_NUM_THREADS=$(nproc) timeout 300 "$BIN_TRIPOD" train --device cpu "${small[@]}" "${extra[@]}" \
    --metrics-file "$OUT/${kind}_cpu.jsonl" > "$OUT/${kind}_cpu.log" 2>&1 || { note "FAIL $kind cpu run"; fail=1; }
  runs=(gpu); [[ $kind == llama ]] && runs+=(gpu_full)
  for r in "${runs[@]}"; do
    rc_flags=(); [[ $r == gpu_full ]] && rc_flags=(--recompute-granularity full)
    timeout 300 "$BIN_TRIPOD" train --device cuda "${small[@]}" "${extra[@]}" "${rc_flags[@]}" \
      --metrics-file "$OUT/${kind}_$r.jsonl" > "$OUT/${kind}_$r.log" 2>&1 || { note "FAIL $kind $r run"; fail=1; }
    for k in lm_loss grad_norm; do
      line=$(compare_metrics "$OUT/${kind}_cpu.jsonl" "$OUT/${kind}_$r.jsonl" $k 1e-4)
      note "qk-layernorm $kind $r vs cpu: $line"
      [[ $line == *PASS ]] || fail=1
    done
  done
done
if [[ $fail -eq 0 ]]; then note "PASS gpu_qwen3_check"; else note "FAIL gpu_qwen3_check"; fi
exit $fail
