#!/usr/bin/env bash
# Tokenizes the King James Bible (Debian bible-kjv) with GPT-2 BPE into a
# Megatron .bin/.idx pair for training, once; later calls reuse it. Prints
#   VOCAB=.../encoder.json
#   MERGES=.../vocab.bpe
#   DATA_PATH=OUT_DIR/kjv_text_document      (pass to tripod train --data-path)
# Documents are the chapters (and headings), separated by blank lines in the
# text; each ends with <|endoftext|>. See docs/data.md.
#
#   scripts/prepare_kjv.sh [OUT_DIR] [TRIPOD_BIN]   default: build/data/ and build/tripod
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/build/data}"
TRIPOD="${2:-$ROOT/build/tripod}"
command -v bible >/dev/null || { echo "prepare_kjv: install bible-kjv bible-kjv-text (scripts/setup.sh does)" >&2; exit 1; }
[[ -x "$TRIPOD" ]] || { echo "prepare_kjv: $TRIPOD not found; build first (scripts/setup.sh)" >&2; exit 1; }
eval "$("$ROOT/scripts/get_gpt2_vocab.sh")"
mkdir -p "$OUT"
PREFIX="$OUT/kjv_text_document"
if [[ ! -s "$PREFIX.bin" || ! -s "$PREFIX.idx" ]]; then
  bible -l100000 gen1:1-rev22:21 > "$OUT/kjv.txt"
  "$TRIPOD" preprocess --input "$OUT/kjv.txt" --input-format text-paragraphs \
    --output-prefix "$OUT/kjv" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod --workers "$(nproc)" --no-progress >&2
fi
echo "VOCAB=$VOCAB"
echo "MERGES=$MERGES"
echo "DATA_PATH=$PREFIX"
