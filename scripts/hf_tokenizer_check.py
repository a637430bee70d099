#!/usr/bin/env python3
"""tripod's HuggingFaceTokenizer against the Hugging Face `tokenizers` library.

Offline: trains three small byte-level BPE tokenizers with `tokenizers`
(Llama 3 style: its Split regex, ignore_merges, <|begin_of_text|> template,
256-style special tokens after the vocabulary, plus vocabulary tokens that no
merge makes; Qwen2 style: its regex, NFC, <|endoftext|>/<|im_start|>/<|im_end|>;
GPT-2 style: the ByteLevel pre-tokenizer's own regex), saves each
tokenizer.json, writes a mixed-script JSONL corpus (Latin, CJK, Cyrillic,
Arabic, emoji, digits, code, special tokens inline, CRLF, U+0085, U+FEFF,
combining marks), runs `tripod preprocess --append-eod` on it and compares
every document's ids with `tokenizers`' encode(text).ids + [eod] exactly.
Then times both on a larger corpus.

    python3 scripts/hf_tokenizer_check.py TRIPOD_BIN [OUT_DIR] [--big-mb 50]

Exits 1 on any mismatch (printing the first differing document), 0 when all
match. Needs: tokenizers (transformers not required).
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SEGMENTS = [
    # Latin, contractions in every case (and U+017F, whose case fold is s)
    "Hello world", "The quick brown fox jumps over the lazy dog.", "naïve café résumé", "It's", "they'll",
    "I'M", "WE'VE", "don't", "You'Re", "x'ſ", "'s", "''", "rock'n'roll", "Ærøskøbing", "straße",
    # CJK, Cyrillic, Arabic, Devanagari, Thai
    "你好，世界！", "日本語のテキストです。", "한국어 텍스트", "Привет, мир!", "Съешь же ещё этих мягких булок",
    "مرحبا بالعالم", "٣٤٥ ١٢", "नमस्ते दुनिया", "สวัสดีครับ",
    # emoji
    "🤖", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "🤖🤖🤖!",
    # digits
    "1234567", "3.14159", "2024-12-03", "$100", "1,000,000", "x2y34z567", "Ⅻ", "½²³",
    # code
    "def f(x):\n    return x**2  # comment", "for (int i = 0; i < n; ++i) { a[i] += 1; }",
    "<div class=\"x\">&nbsp;</div>", "if (a<|b) {}", "#include <vector>\r\n", "SELECT * FROM t WHERE id=42;",
    # special tokens inline (each tokenizer knows some of them, the others are text)
    "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<mask>",
    "<|im_start|>user\nhi<|im_end|>", "a<|end_of_text|>b",
    # combining marks (NFC composes some), Hangul jamo, odd letters
    "e\u0301", "n\u0303o", "A\u030a", "\u1100\u1161\u11a8", "Z\u0351\u0358a\u0306\u0324l", "ǅ ʰ ª µ ß", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\u0301",
    # words that only the Llama-style tokenizer's extra vocabulary holds whole
    "tripodunreachable", "Ġzzqqxx", " zzqqxx",
]
SPACES = ["", "", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "   \n", " \n ", "\u00a0",
          "\u3000", "\u0085", "\ufeff", "\u2028", "\x0b", "\x0c"]


def make_docs(rng, n, max_segments):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, max_segments)):
            parts.append(rng.choice(SEGMENTS))
            parts.append(rng.choice(SPACES))
        text = "".join(parts)
        if rng.random() < 0.1:
            text = rng.choice(SPACES[2:]) + text + rng.choice(SPACES[2:]) * rng.randint(1, 4)
        docs.append(text if text else "x")
    return docs


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train(kind, corpus, out_dir):
    """Trains and saves a tokenizer of one style; returns (path, eod id, Tokenizer)."""
    tok = Tokenizer(models.BPE())
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if kind == "llama3" else QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    path = os.path.join(out_dir, f"{kind}_tokenizer.json")
    tok.save(path)
    if kind == "llama3":
        # Llama 3's file: ignore_merges, and vocabulary tokens that no merge makes.
        j = json.load(open(path, encoding="utf-8"))
        j["model"]["ignore_merges"] = True
        b2u = bytes_to_unicode()
        vocab = j["model"]["vocab"]
        for w in ["tripodunreachable", " zzqqxx", "zzqqxx"]:
            s = "".join(b2u[b] for b in w.encode())
            if s not in vocab:
                vocab[s] = len(vocab)
        json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)
        tok = Tokenizer.from_file(path)
    specials = {"llama3": ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(6)],
                "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                "gpt2": ["<|endoftext|>"]}[kind]
    tok.add_special_tokens(specials)
    if kind == "llama3":
        from tokenizers import AddedToken
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(path)
    tok = Tokenizer.from_file(path)
    eod = tok.token_to_id({"llama3": "<|end_of_text|>", "qwen2": "<|endoftext|>", "gpt2": "<|endoftext|>"}[kind])
    return path, eod, tok


def read_indexed(prefix):
    """Documents of a Megatron .bin/.idx pair as lists of ids."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", prefix
    dtype = idx[17]
    n, = struct.unpack_from("<Q", idx, 18)
    sizes = struct.unpack_from(f"<{n}i", idx, 34)
    ptrs = struct.unpack_from(f"<{n}q", idx, 34 + 4 * n)
    code, width = {8: ("H", 2), 4: ("i", 4)}[dtype]
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    return [list(struct.unpack_from(f"<{s}{code}", data, p)) for s, p in zip(sizes, ptrs)]


def run_tripod(tripod, tok_path, jsonl, prefix, workers):
    t0 = time.time()
    r = subprocess.run([tripod, "preprocess", "--input", jsonl, "--output-prefix", prefix,
                        "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok_path,
                        "--append-eod", "--workers", str(workers), "--no-progress"],
                       capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        raise SystemExit(f"FAIL tripod preprocess exited {r.returncode}")
    mbs = [l for l in r.stderr.splitlines() + r.stdout.splitlines() if "MB/s" in l]
    return read_indexed(prefix + "_text_document"), wall, (mbs[-1].split("preprocess: ")[-1] if mbs else "")


def first_mismatch(docs, want, got, tok):
    if len(want) != len(got):
        return f"{len(got)} documents from tripod, {len(want)} expected"
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            k = next((j for j in range(min(len(w), len(g))) if w[j] != g[j]), min(len(w), len(g)))
            lo = max(0, k - 3)
            return (f"document {i}: {json.dumps(docs[i], ensure_ascii=False)[:400]}\n"
                    f"  first difference at id {k} of {len(w)} (tripod has {len(g)})\n"
                    f"  tokenizers: {w[lo:k + 6]} = {[tok.id_to_token(x) for x in w[lo:k + 6]]}\n"
                    f"  tripod:     {g[lo:k + 6]} = {[tok.id_to_token(x) for x in g[lo:k + 6]]}")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tripod")
    ap.add_argument("out", nargs="?", default="hf_tokenizer_out")
    ap.add_argument("--big-mb", type=float, default=50.0, help="size of the timing corpus")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import tokenizers
    print(f"tokenizers {tokenizers.__version__}, {os.cpu_count()} CPUs")
    rng = random.Random(20261203)
    corpus = make_docs(rng, 20000, 30)
    docs = make_docs(random.Random(7), 3000, 40) + SEGMENTS + SPACES[2:] + [
        "<|begin_of_text|>", "  <mask>  x", "x<mask>", "\n<mask>\n", "1" * 100, "a" * 300, " " * 50 + "x"]
    jsonl = os.path.join(args.out, "docs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    big = []
    size = 0
    brng = random.Random(11)
    while size < args.big_mb * 1e6:
        big.extend(make_docs(brng, 1000, 60))
        size = sum(len(d.encode()) for d in big)
    big_jsonl = os.path.join(args.out, "big.jsonl")
    with open(big_jsonl, "w", encoding="utf-8") as f:
        for d in big:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    nproc = os.cpu_count() or 1
    failed = False
    for kind in ["llama3", "qwen2", "gpt2"]:
        path, eod, tok = train(kind, corpus, args.out)
        want = [e.ids + [eod] for e in tok.encode_batch(docs)]
        got, _, _ = run_tripod(args.tripod, path, jsonl, os.path.join(args.out, kind), 2)
        bad = first_mismatch(docs, want, got, tok)
        ntok = sum(len(w) for w in want)
        if bad:
            failed = True
            print(f"FAIL {kind}: ids differ from tokenizers'\n{bad}")
        else:
            print(f"PASS {kind}: {len(docs)} documents, {ntok} ids identical to tokenizers' "
                  f"(vocab {tok.get_vocab_size()}, eod {eod})")
        # Timing on the large corpus (ids compared again).
        t0 = time.time()
        want_big = [e.ids + [eod] for e in tok.encode_batch(big)]
        t_batch = time.time() - t0
        t0 = time.time()
        for d in big[: len(big) // 10]:
            tok.encode(d)
        t_single = (time.time() - t0) * 10
        got1, wall1, line1 = run_tripod(args.tripod, path, big_jsonl, os.path.join(args.out, kind + "_big1"), 1)
        gotn, walln, linen = run_tripod(args.tripod, path, big_jsonl, os.path.join(args.out, kind + "_bign"), nproc)
        for name, g in [("workers 1", got1), (f"workers {nproc}", gotn)]:
            bad = first_mismatch(big, want_big, g, tok)
            if bad:
                failed = True
                print(f"FAIL {kind} timing corpus, {name}:\n{bad}")
        mb = size / 1e6
        print(f"TIME {kind}: {mb:.1f} MB | tokenizers encode_batch ({nproc} threads) {mb / t_batch:.1f} MB/s, "
              f"encode one by one {mb / t_single:.1f} MB/s | tripod preprocess --workers 1 {mb / wall1:.1f} MB/s "
              f"wall ({line1}), --workers {nproc} {mb / walln:.1f} MB/s wall ({linen})")
    print("FAILED" if failed else "ALL PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
