#!/usr/bin/env bash
# GPU-machine check of `tripod convert --import-megatron` against Megatron-LM
# itself (docs/checkpoints.md, "Megatron-LM checkpoints"):
#
#   tests/ckpt/megatron_import_check.sh MEGATRON_LM_DIR
#
# 1. tokenizes this repository's docs/*.md with `tripod preprocess` (GPT-2 BPE);
# 2. trains a small GPT (4 layers, hidden 128, 4 heads, seq 64) for 40
#    iterations with Megatron-LM's own pretrain_gpt.py on one GPU: TP 1, PP 1,
#    --transformer-impl local, --ckpt-format torch (the legacy format), fp32,
#    no apex needed (gradient-accumulation and masked-softmax fusions off);
# 3. evaluates that checkpoint with Megatron-core's own GPTModel (built from
#    the checkpoint's args with Megatron's core_transformer_config_from_args,
#    loaded with load_state_dict): the mean loss on a batch of 4 sequences
#    taken from the token stream, and a 16-token greedy continuation of a
#    prompt (GPT-2 tokenizer of `transformers` over the same files);
# 4. imports the checkpoint with tripod, computes the loss on the same batch
#    (`tripod train --finetune --lr 0` on a one-document dataset holding
#    exactly those sequences: its first logged loss) and the greedy
#    continuation (`tripod generate --greedy`), and compares:
#    |loss difference| <= 2e-3 and the same continuation text.
#
# Needs: python3 with torch (CUDA) and transformers; MEGATRON_LM_DIR is a
# Megatron-LM checkout (not part of this repository; pass its path); a
# tripod binary with CUDA (TRIPOD, default build/tripod); GPT-2's vocab and
# merges files: GPT2_DIR (default out/gpt2, else ~/.cache/tripod/gpt2/package)
# holding encoder.json and vocab.bpe (scripts/get_gpt2_vocab.sh fetches them;
# copy them into out/gpt2 to carry them to a machine without network).
# Outputs under WORK (default out/megatron_check). Exit 0 when both match.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
MEGATRON="${1:?usage: $0 MEGATRON_LM_DIR}"
MEGATRON="$(cd "$MEGATRON" && pwd)"
PY="${PYTHON:-python3}"
TRIPOD="${TRIPOD:-$ROOT/build/tripod}"
WORK="${WORK:-$ROOT/out/megatron_check}"
GPT2_DIR="${GPT2_DIR:-$ROOT/out/gpt2}"
[[ -f "$GPT2_DIR/encoder.json" ]] || GPT2_DIR="$HOME/.cache/tripod/gpt2/package"
VOCAB="$GPT2_DIR/encoder.json"
MERGES="$GPT2_DIR/vocab.bpe"
PORT="${MASTER_PORT:-29517}"

fail() { echo "megatron_import_check: $*" >&2; exit 1; }
[[ -f "$MEGATRON/pretrain_gpt.py" ]] || fail "$MEGATRON has no pretrain_gpt.py (pass a Megatron-LM checkout)"
[[ -x "$TRIPOD" ]] || fail "no tripod binary at $TRIPOD (set TRIPOD=...)"
[[ -f "$VOCAB" && -f "$MERGES" ]] || fail "GPT-2 files not found in $GPT2_DIR (set GPT2_DIR; scripts/get_gpt2_vocab.sh)"
PYTHONPATH="$MEGATRON${PYTHONPATH:+:$PYTHONPATH}" "$PY" - <<'EOF' || fail "python modules missing (see above)"
import importlib, sys
missing = []
for m in ["torch", "transformers", "megatron.core", "megatron.core.models.gpt"]:
    try:
        importlib.import_module(m)
    except Exception as e:  # report every missing piece at once
        missing.append(f"{m}: {e}")
import torch
if not torch.cuda.is_available():
    missing.append("torch sees no CUDA device")
print("\n".join(missing), file=sys.stderr)
sys.exit(1 if missing else 0)
EOF

rm -rf "$WORK"
mkdir -p "$WORK"
echo "== 1/4 corpus: docs/*.md -> $WORK/corpus_text_document"
"$PY" - "$ROOT/docs" "$WORK/corpus.jsonl" <<'EOF'
import json, pathlib, sys
with open(sys.argv[2], "w") as f:
    for p in sorted(pathlib.Path(sys.argv[1]).glob("*.md")):
        f.write(json.dumps({"text": p.read_text()}) + "\n")
EOF
"$TRIPOD" preprocess --input "$WORK/corpus.jsonl" --output-prefix "$WORK/corpus" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$VOCAB" --merge-file "$MERGES" --append-eod --workers 4 --no-progress > "$WORK/preprocess.log" 2>&1 ||
  { cat "$WORK/preprocess.log"; fail "tripod preprocess failed"; }

echo "== 2/4 train with Megatron-LM's pretrain_gpt.py (TP 1, PP 1, legacy torch checkpoint)"
MODEL_ARGS=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64)
PYTHONPATH="$MEGATRON${PYTHONPATH:+:$PYTHONPATH}" CUDA_DEVICE_MAX_CONNECTIONS=1 \
  "$PY" -m torch.distributed.run --nproc_per_node 1 --master_addr localhost --master_port "$PORT" \
  "$MEGATRON/pretrain_gpt.py" "${MODEL_ARGS[@]}" --position-embedding-type learned_absolute --normalization LayerNorm \
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 4 --global-batch-size 8 --train-iters 40 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine \
  --lr-warmup-iters 4 --weight-decay 0.01 --clip-grad 1.0 --seed 1234 \
  --hidden-dropout 0 --attention-dropout 0 \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB" --merge-file "$MERGES" \
  --data-path "$WORK/corpus_text_document" --split 100,0,0 \
  --transformer-impl local --no-gradient-accumulation-fusion --no-masked-softmax-fusion \
  --ckpt-format torch --save "$WORK/megatron" --save-interval 40 \
  --eval-iters 0 --eval-interval 1000 --log-interval 10 --distributed-backend nccl \
  > "$WORK/megatron_train.log" 2>&1 || { tail -n 60 "$WORK/megatron_train.log"; fail "Megatron-LM training failed"; }
[[ -f "$WORK/megatron/latest_checkpointed_iteration.txt" ]] || fail "Megatron wrote no checkpoint ($WORK/megatron_train.log)"
grep -E "iteration +40/" "$WORK/megatron_train.log" | tail -n 1 | cut -c1-200 || true

echo "== 3/4 Megatron's own evaluation of its checkpoint"
PROMPT="The checkpoint"
PYTHONPATH="$MEGATRON${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$WORK" "$VOCAB" "$MERGES" "$PROMPT" <<'EOF'
import json, os, struct, sys
import numpy as np
import torch
work, vocab, merges, prompt = sys.argv[1:5]
B, T, NEW = 4, 64, 16
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
os.environ.setdefault("MASTER_ADDR", "localhost")
os.environ.setdefault("MASTER_PORT", "29518")
torch.distributed.init_process_group("nccl", rank=0, world_size=1)
torch.cuda.set_device(0)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
model_parallel_cuda_manual_seed(1234)
it = open(os.path.join(work, "megatron", "latest_checkpointed_iteration.txt")).read().strip()
path = os.path.join(work, "megatron", "iter_%07d" % int(it), "mp_rank_00", "model_optim_rng.pt")
try:
    sd = torch.load(path, map_location="cpu", weights_only=False)
except TypeError:
    sd = torch.load(path, map_location="cpu")
args = sd["args"]
try:
    from megatron.training.argument_utils import core_transformer_config_from_args
except ImportError:
    from megatron.training.arguments import core_transformer_config_from_args
config = core_transformer_config_from_args(args)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                 vocab_size=args.padded_vocab_size, max_sequence_length=args.max_position_embeddings,
                 pre_process=True, post_process=True, share_embeddings_and_output_weights=True,
                 position_embedding_type="learned_absolute").cuda().float().eval()
res = model.load_state_dict(sd["model"], strict=False)
bad = [k for k in res.missing_keys if not k.endswith("_extra_state")] + \
      [k for k in res.unexpected_keys if not k.endswith("_extra_state")]
assert not bad, f"state dict mismatch: {bad}"

def logits_of(tokens):  # (b, s) -> (b, s, V)
    s = tokens.shape[1]
    pos = torch.arange(s, device="cuda").unsqueeze(0).expand_as(tokens)
    mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool, device="cuda"), diagonal=1)
    out = model(tokens, pos, mask)
    return out[0] if isinstance(out, tuple) else out

# The batch: sequences [i*T, i*T + T + 1) of the token stream (documents concatenated).
idx = open(os.path.join(work, "corpus_text_document.idx"), "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00"
code = idx[17]
dtype = {4: np.int32, 8: np.uint16}[code]
stream = np.fromfile(os.path.join(work, "corpus_text_document.bin"), dtype=dtype)[: B * T + 1].astype(np.int64)
batch = torch.tensor(np.stack([stream[i * T: i * T + T + 1] for i in range(B)]), device="cuda")
with torch.no_grad():
    lg = logits_of(batch[:, :-1]).float()
    loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), batch[:, 1:].reshape(-1)).item()
# One document of exactly B*T+1 tokens: tripod's only samples are these sequences.
ids = stream.astype(np.int32)
with open(os.path.join(work, "batch_text_document.bin"), "wb") as f:
    f.write(ids.tobytes())
with open(os.path.join(work, "batch_text_document.idx"), "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 4) + struct.pack("<Q", 1) +
            struct.pack("<Q", 2) + struct.pack("<i", len(ids)) + struct.pack("<q", 0) + struct.pack("<2q", 0, 1))
from transformers import GPT2TokenizerFast
tok = GPT2TokenizerFast(vocab_file=vocab, merges_file=merges)
ids = torch.tensor([tok.encode(prompt)], device="cuda")
with torch.no_grad():
    for _ in range(NEW):
        nxt = logits_of(ids)[0, -1, : tok.vocab_size].argmax().view(1, 1)
        ids = torch.cat([ids, nxt], dim=1)
text = tok.decode(ids[0].tolist())
json.dump({"loss": loss, "text": text, "iteration": int(it)}, open(os.path.join(work, "megatron_eval.json"), "w"))
print(f"   Megatron: loss {loss:.6f} on {B}x{T} tokens; greedy: {text!r}")
torch.distributed.destroy_process_group()
EOF

echo "== 4/4 tripod: import, loss on the same batch, greedy continuation"
"$TRIPOD" convert --import-megatron "$WORK/megatron" --save "$WORK/tripod_ckpt" --vocab-file "$VOCAB" \
  --merge-file "$MERGES" 2>&1 | tail -n 1
"$TRIPOD" train "${MODEL_ARGS[@]}" --load "$WORK/tripod_ckpt" --finetune \
  --micro-batch-size 4 --global-batch-size 4 --train-iters 1 --lr 0 --min-lr 0 --hidden-dropout 0 \
  --attention-dropout 0 --data-path "$WORK/batch_text_document" --split 1 --vocab-file "$VOCAB" \
  --merge-file "$MERGES" --log-interval 1 --eval-interval 0 --metrics-file "$WORK/tripod_metrics.jsonl" \
  > "$WORK/tripod_eval.log" 2>&1 || { tail -n 30 "$WORK/tripod_eval.log"; fail "tripod train (evaluation) failed"; }
"$TRIPOD" generate --load "$WORK/tripod_ckpt" --prompt "$PROMPT" --greedy --max-new-tokens 16 --ignore-eos \
  > "$WORK/tripod_greedy.txt" 2> "$WORK/tripod_generate.log" || { cat "$WORK/tripod_generate.log"; fail "tripod generate failed"; }
"$PY" - "$WORK" <<'EOF'
import json, os, sys
work = sys.argv[1]
m = json.load(open(os.path.join(work, "megatron_eval.json")))
first = json.loads(open(os.path.join(work, "tripod_metrics.jsonl")).readline())
loss = first["lm_loss"]
text = open(os.path.join(work, "tripod_greedy.txt")).read().rstrip("\n")
print(f"   tripod:   loss {loss:.6f}; greedy: {text!r}")
ok_loss = abs(loss - m["loss"]) <= 2e-3
ok_text = text == m["text"]
print(f"   loss difference {abs(loss - m['loss']):.2e} ({'ok' if ok_loss else 'MISMATCH'}, limit 2e-3); "
      f"greedy continuation {'identical' if ok_text else 'DIFFERS'}")
sys.exit(0 if ok_loss and ok_text else 1)
EOF
echo "megatron_import_check: PASS"
