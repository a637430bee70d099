#!/usr/bin/env python3
"""Writes GPT-2's encoder.json + vocab.bpe as a Hugging Face tokenizer.json,
with GPT-2's own pre-tokenizer (ByteLevel, use_regex) or Llama 3's Split
regex and ignore_merges, for timing HuggingFaceTokenizer (bench/tokenizer/run.sh).

    gpt2_as_hf.py VOCAB MERGES gpt2|llama3 OUT_JSON
"""
import json
import sys

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")

vocab_file, merge_file, style, out = sys.argv[1:5]
vocab = json.load(open(vocab_file, encoding="utf-8"))
merges = [l for i, l in enumerate(open(merge_file, encoding="utf-8").read().split("\n"))
          if l and not (i == 0 and l.startswith("#version"))]
if style == "gpt2":
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
else:
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
tok = {"version": "1.0", "normalizer": None, "pre_tokenizer": pre, "post_processor": byte_level, "decoder": byte_level,
       "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": False, "special": True}],
       "model": {"type": "BPE", "dropout": None, "ignore_merges": style == "llama3", "vocab": vocab, "merges": merges}}
json.dump(tok, open(out, "w", encoding="utf-8"), ensure_ascii=False)
