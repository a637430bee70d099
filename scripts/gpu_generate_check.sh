#!/usr/bin/env bash
# `tripod generate` on a GPU machine, with a tripod built elsewhere
# (STAGE_TARGETS="tripod test_backend_ops_gpu" scripts/gpu_check.sh --stage DIR)
# or here:
#   0. The ops the KV cache calls, on the GPU against the CPU in f64 (the op
#      harness: the block attention of one query against a cache, the K/V
#      copy, RoPE at positions), when test_backend_ops_gpu is staged.
#   1. Same ids on cuda and cpu: a small GPT-2 and a small Llama (GQA, RoPE,
#      RMSNorm, SwiGLU) trained 150 iterations on the GPU (mock data, whose
#      walks a model learns), then 200 greedy tokens on cuda (KV cache and
#      --no-kv-cache) and on cpu (KV cache and --no-kv-cache), fp32: the four
#      id lists must be equal; the worst cuda-vs-cpu logit difference and the
#      smallest top-2 margin are printed. Without --device it must pick cuda.
#      bf16 on cuda: how many leading ids equal fp32's (printed, not gated).
#   2. Speed of the KV cache: a GPT-2 124M shape and a Llama ~0.25B shape
#      (16 layers, hidden 1024, 16 heads in 4 query groups; random weights,
#      saved after one iteration), prompt of 32 ids + 480
#      new tokens on cuda with and without the cache, fp32 and bf16: tokens/s
#      and the speed-up (the cached run must not be slower).
# Every verdict is a PASS or FAIL line in $OUT/summary.txt, beside the logs;
# checkpoints and logits (GBs) stay in $WORK (default $TMPDIR/tripod_generate_check,
# removed at the end). Exits 1 on any FAIL.
# Runs in about 2-3 minutes on one H200.
#
# usage: scripts/gpu_generate_check.sh (--stage DIR | --tripod BIN [--ops BIN]) [--out DIR] [--checks "ops ids speed"]
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; BIN_TRIPOD=""; BIN_OPS=""; OUT=${OUT:-gpu_generate_out}; checks="ops ids speed"
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --tripod) BIN_TRIPOD=$2; shift 2 ;;
    --ops) BIN_OPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --checks) checks=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
WORK=${WORK:-${TMPDIR:-/tmp}/tripod_generate_check}
mkdir -p "$OUT" "$WORK"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $checks " == *" $1 "* ]]; }
fails=0
verdict() {  # verdict OK(0/1) TEXT
  if [[ $1 == 0 ]]; then note "PASS $2"; else note "FAIL $2"; fails=$((fails + 1)); fi
}
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_generate_stage"
  [[ -x $STAGE_DIR/bin/test_backend_ops_gpu ]] && BIN_OPS=$STAGE_DIR/bin/test_backend_ops_gpu
fi
[[ -x $BIN_TRIPOD ]] || { note "FAIL no tripod binary (pass --stage DIR or --tripod BIN)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
LLAMA=(--group-query-attention --position-embedding-type rope --normalization RMSNorm --swiglu
       --untie-embeddings-and-output-weights --disable-bias-linear)

# gen NAME CKPT FLAGS...: ids to $WORK/NAME.ids, step logits to $WORK/NAME.f32, log to $OUT/NAME.log
gen() {
  local name=$1 ck=$2; shift 2
  timeout 300 "$BIN_TRIPOD" generate --load "$ck" --step-logits-out "$WORK/$name.f32" "$@" \
    > "$WORK/$name.ids" 2> "$OUT/$name.log"
  local rc=$?
  [[ $rc == 0 ]] || { note "generate $name rc=$rc: $(tail -3 "$OUT/$name.log" | tr '\n' ' ')"; return 1; }
}
speed_line() { grep -m1 "^generated" "$OUT/$1.log"; }
tokens_per_s() { sed -n 's/^generated [0-9]* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s.*/\1/p' "$OUT/$1.log"; }

# compare A B VOCAB: ids equal?, count, equal leading ids, max |logit diff|, min top-2 margin of A
compare() {
  python3 - "$WORK/$1" "$WORK/$2" "$3" <<'PY'
import array, sys
a, b, V = sys.argv[1], sys.argv[2], int(sys.argv[3])
ia, ib = open(a + ".ids").read().split(), open(b + ".ids").read().split()
try:
    import numpy as np
    la, lb = np.fromfile(a + ".f32", dtype=np.float32), np.fromfile(b + ".f32", dtype=np.float32)
    n = min(la.size, lb.size) // V * V
    diff = float(np.abs(la[:n] - lb[:n]).max()) if n else float("inf")
    top2 = np.sort(la[:la.size // V * V].reshape(-1, V), axis=1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min()) if top2.size else float("inf")
except ImportError:  # slower, same numbers
    la, lb = array.array("f"), array.array("f")
    la.frombytes(open(a + ".f32", "rb").read()); lb.frombytes(open(b + ".f32", "rb").read())
    n = min(len(la), len(lb))
    diff = max((abs(la[i] - lb[i]) for i in range(n)), default=float("inf"))
    rows = [sorted(la[s * V:(s + 1) * V])[-2:] for s in range(len(la) // V)]
    margin = min((r[1] - r[0] for r in rows), default=float("inf"))
same = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
print(f"{int(ia == ib and len(ia) > 0)} {len(ia)} {same} {diff:.3e} {margin:.3e}")
PY
}

if has ops; then
  if [[ -x $BIN_OPS ]]; then
    note "---- the KV cache's ops on cuda vs the CPU in f64 (op harness) ----"
    "$BIN_OPS" --gtest_filter='*attention_block_forward*:*attention_kv_copy*:*rope_forward_positions*' \
      > "$OUT/ops.log" 2>&1
    rc=$?
    verdict $((rc != 0)) "op harness (block attention incl. _decode_*, K/V copy, RoPE at positions): \
$(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/ops.log" | tr '\n' ' ')"
  else
    note "SKIP op harness: test_backend_ops_gpu not staged"
  fi
fi

if has ids; then
  note "---- same greedy ids on cuda and cpu (fp32; KV cache and full recompute) ----"
  small=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --mock-data --vocab-size 512
         --micro-batch-size 8 --global-batch-size 8 --train-iters 150 --lr 3e-3 --lr-warmup-iters 10
         --log-interval 50 --eval-interval 0 --seed 1234)
  for model in gpt llama; do
    extra=(); [[ $model == llama ]] && extra=("${LLAMA[@]}" --num-query-groups 2 --ffn-hidden-size 512)
    ck="$WORK/ck_$model"; rm -rf "$ck"
    timeout 300 "$BIN_TRIPOD" train --device cuda "${small[@]}" "${extra[@]}" --save "$ck" > "$OUT/train_$model.log" 2>&1
    rc=$?; note "train $model on cuda rc=$rc, last loss: $(grep -o 'lm loss: [0-9.E+-]*' "$OUT/train_$model.log" | tail -1)"
    [[ $rc == 0 ]] || { verdict 1 "$model: no checkpoint"; continue; }
    prompt=(--prompt-ids 17,5,300,42,7 --greedy --max-new-tokens 200)
    gen ${model}_auto "$ck" "${prompt[@]}"
    grep -q "^device: cuda" "$OUT/${model}_auto.log"; verdict $? "$model: without --device it generates on cuda ($(head -1 "$OUT/${model}_auto.log"))"
    gen ${model}_cuda "$ck" --device cuda "${prompt[@]}" && \
    gen ${model}_cuda_full "$ck" --device cuda "${prompt[@]}" --no-kv-cache && \
    gen ${model}_cpu "$ck" --device cpu "${prompt[@]}" && \
    gen ${model}_cpu_full "$ck" --device cpu "${prompt[@]}" --no-kv-cache || { verdict 1 "$model: a generate run failed"; continue; }
    for other in cuda_full cpu cpu_full; do
      read -r ok n same diff margin <<< "$(compare ${model}_cuda ${model}_$other 512)"
      verdict $((1 - ok)) "$model greedy ids, cuda KV cache vs $other: $same of $n equal; max |logit diff| $diff (smallest top-2 margin $margin)"
    done
    gen ${model}_cuda_bf16 "$ck" --device cuda --bf16 "${prompt[@]}" && {
      read -r ok n same diff margin <<< "$(compare ${model}_cuda_bf16 ${model}_cuda 512)"
      note "INFO $model bf16 on cuda: the first $same of $n ids equal fp32's (max |logit diff| $diff)"
    }
  done
fi

if has speed; then
  note "---- KV cache speed-up on cuda (prompt 32 ids + 480 new tokens) ----"
  prompt_ids=$(seq -s, 1 32)
  for shape in gpt124m llama250m; do
    case $shape in
      gpt124m) flags=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --vocab-size 50257) ;;
      llama250m) flags=(--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --num-query-groups 4
                        --ffn-hidden-size 2816 --seq-length 1024 --vocab-size 32000 "${LLAMA[@]}") ;;
    esac
    ck="$WORK/ck_$shape"; rm -rf "$ck"
    timeout 300 "$BIN_TRIPOD" train --device cuda "${flags[@]}" --mock-data --micro-batch-size 1 --global-batch-size 1 \
      --train-iters 1 --lr 1e-4 --eval-interval 0 --save "$ck" > "$OUT/train_$shape.log" 2>&1 ||
      { verdict 1 "$shape: no checkpoint ($(tail -2 "$OUT/train_$shape.log" | tr '\n' ' '))"; continue; }
    for dt in fp32 bf16; do
      b=(); [[ $dt == bf16 ]] && b=(--bf16)
      run=(--device cuda "${b[@]}" --prompt-ids "$prompt_ids" --greedy --max-new-tokens 480)
      gen ${shape}_${dt}_cache "$ck" "${run[@]}" && gen ${shape}_${dt}_full "$ck" "${run[@]}" --no-kv-cache || {
        verdict 1 "$shape $dt: a generate run failed"; continue; }
      c=$(tokens_per_s ${shape}_${dt}_cache); f=$(tokens_per_s ${shape}_${dt}_full)
      note "$shape $dt cache:   $(speed_line ${shape}_${dt}_cache)"
      note "$shape $dt no cache: $(speed_line ${shape}_${dt}_full)"
      up=$(python3 -c "print(f'{$c / $f:.1f}')" 2>/dev/null || echo 0)
      read -r ok n same diff margin <<< "$(compare ${shape}_${dt}_cache ${shape}_${dt}_full $([[ $shape == gpt124m ]] && echo 50257 || echo 32000))"
      python3 -c "import sys; sys.exit(0 if $c >= $f else 1)"
      verdict $? "$shape $dt: KV cache ${c} tokens/s vs ${f} without: ${up}x (ids equal for $same of $n; max |logit diff| $diff)"
    done
    rm -rf "$ck"
  done
fi

rm -rf "$WORK"
note "---- $fails FAIL(s) ----"
# Few files come back from some GPU hosts: summary.txt loose, the logs packed.
(cd "$OUT" && logs=$(ls | grep -vE '^(summary.txt|logs.tar.gz)$') && [[ -n $logs ]] &&
   tar czf logs.tar.gz $logs && rm -f $logs)
[[ $fails == 0 ]]
