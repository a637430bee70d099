#!/usr/bin/env python3
"""tripod's Llama family (and Qwen3, --qk-layernorm) against Hugging Face
transformers (run on a machine with torch and transformers; tripod trains on
the CPU, fp32; `tripod generate` runs on the default device).

1. Import: a random LlamaForCausalLM (grouped-query attention, untied; and a
   second one with multi-head attention, tied embeddings, rope_theta 500000)
   saved with save_pretrained -> `tripod convert --import-hf` -> `tripod
   generate --prompt-ids --greedy --logits-out`: the prompt's logits match
   transformers' within LOGIT_TOL (relative to the largest logit) and the
   greedy continuation is the same ids as model.generate(do_sample=False).
   Every folder is saved in shards (max_shard_size SHARD: several
   model-0000i-of-0000N.safetensors with model.safetensors.index.json), as
   every hub checkpoint above 5GB is. A random Qwen3ForCausalLM (q_norm /
   k_norm, head_dim = hidden / heads) the same way.
2. Export: `tripod train` a few iterations of a Llama-family model (mock data)
   -> `tripod convert --export-hf` -> from_pretrained: the same two
   comparisons against `tripod generate` on the trained checkpoint; then
   the same with --qk-layernorm (Qwen3ForCausalLM), exported in shards
   (--max-shard-size SHARD).

usage: llama_hf_check.py TRIPOD_BIN WORK_DIR
Prints one PASS/FAIL line per comparison and exits non-zero on any FAIL.
"""
import inspect
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

try:  # transformers >= 4.51
    from transformers import Qwen3Config, Qwen3ForCausalLM
except ImportError:
    Qwen3Config = Qwen3ForCausalLM = None

LOGIT_TOL = 1e-4  # fp32 both sides; differences are summation order only
NEW_TOKENS = 16
SHARD = "200KB"  # a 2-layer model of ~1.5 MB in ~8 shards
failures = []


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    return r.stdout


def check(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


def compare(tag, tripod, ckpt, hf_model, prompt):
    vocab = hf_model.config.vocab_size
    logits_file = os.path.join(os.path.dirname(ckpt), f"{tag}_logits.f32")
    out = run([tripod, "generate", "--load", ckpt, "--prompt-ids", ",".join(map(str, prompt)), "--greedy",
               "--max-new-tokens", str(NEW_TOKENS), "--logits-out", logits_file])
    ours_ids = [int(t) for t in out.split()]
    ours = np.fromfile(logits_file, dtype="<f4").reshape(len(prompt), vocab)
    hf_model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, as tripod's --prompt-ids run
    hf_model.generation_config.pad_token_id = 0
    with torch.no_grad():
        ids = torch.tensor([prompt])
        theirs = hf_model(ids).logits[0].float().numpy()
        gen = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=NEW_TOKENS)[0, len(prompt):].tolist()
    scale = float(np.abs(theirs).max())
    diff = float(np.abs(ours - theirs).max())
    check(f"{tag} logits", diff <= LOGIT_TOL * max(scale, 1.0),
          f"max |tripod - transformers| {diff:.3e}, max |logit| {scale:.3f}, tol {LOGIT_TOL:g} x max(1, |logit|)")
    check(f"{tag} greedy continuation", ours_ids == gen, f"tripod {ours_ids} / transformers {gen}")


def save_sharded(m, path):
    try:
        m.save_pretrained(path, safe_serialization=True, max_shard_size=SHARD)
    except TypeError:  # a transformers without safe_serialization (always safetensors)
        m.save_pretrained(path, max_shard_size=SHARD)
    shards = [f for f in os.listdir(path) if f.startswith("model-") and f.endswith(".safetensors")]
    check(f"{os.path.basename(path)} saved in shards", len(shards) > 1 and
          os.path.exists(os.path.join(path, "model.safetensors.index.json")), f"{len(shards)} shards")


def random_llama(path, seed, rope_theta, qwen3=False, **kw):
    torch.manual_seed(seed)
    cls_cfg, cls = (Qwen3Config, Qwen3ForCausalLM) if qwen3 else (LlamaConfig, LlamaForCausalLM)
    # transformers 5 takes rope_parameters; 4 takes rope_theta.
    if "rope_parameters" in inspect.signature(cls_cfg.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
    else:
        kw["rope_theta"] = rope_theta
    if qwen3:  # tripod's head size is hidden / heads; no sliding window
        kw.update(head_dim=256 // kw["num_attention_heads"], use_sliding_window=False)
    else:
        kw["mlp_bias"] = False
    cfg = cls_cfg(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  max_position_embeddings=128, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
                  initializer_range=0.05, **kw)
    m = cls(cfg).float().eval()
    with torch.no_grad():  # norm gains away from 1 so that a mixed-up norm shows (q_norm / k_norm too)
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    save_sharded(m, path)
    return m


def main():
    tripod, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    prompt = [3, 17, 256, 999, 42, 7, 500, 123, 64, 1]

    # 1. Import.
    cases = [("import_gqa_untied", dict(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False,
                                        rope_theta=10000.0)),
             ("import_mha_tied", dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
                                      rope_theta=500000.0))]
    if Qwen3ForCausalLM is not None:
        cases.append(("import_qwen3", dict(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False,
                                           rope_theta=1000000.0, qwen3=True)))
    else:
        check("Qwen3ForCausalLM in transformers", False, "this transformers has no Qwen3 (>= 4.51 needed)")
    for i, (tag, kw) in enumerate(cases):
        hf_dir, ckpt = os.path.join(work, tag + "_hf"), os.path.join(work, tag + "_ckpt")
        m = random_llama(hf_dir, 100 + i, **kw)
        run([tripod, "convert", "--import-hf", hf_dir, "--save", ckpt])
        compare(tag, tripod, ckpt, m, prompt)

    # 2. Export of models tripod trained: Llama (one file), Qwen3 (shards).
    base = ["--device", "cpu", "--num-layers", "2", "--hidden-size", "128", "--num-attention-heads",
            "8", "--group-query-attention", "--num-query-groups", "2", "--position-embedding-type", "rope",
            "--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "256",
            "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--seq-length", "64", "--mock-data",
            "--vocab-size", "1000", "--micro-batch-size", "4", "--train-iters", "20", "--lr", "3e-3",
            "--log-interval", "10", "--eval-interval", "0"]
    for tag, extra, export_extra, cls in [("export_trained", [], [], "LlamaForCausalLM"),
                                          ("export_qwen3", ["--qk-layernorm"], ["--max-shard-size", SHARD],
                                           "Qwen3ForCausalLM")]:
        if cls == "Qwen3ForCausalLM" and Qwen3ForCausalLM is None:
            continue
        ckpt, hf_dir = os.path.join(work, tag + "_ckpt"), os.path.join(work, tag + "_hf")
        run([tripod, "train", *base, *extra, "--save", ckpt])
        run([tripod, "convert", "--load", ckpt, "--export-hf", hf_dir, *export_extra])
        m = AutoModelForCausalLM.from_pretrained(hf_dir).float().eval()
        check(f"{tag} class", type(m).__name__ == cls, type(m).__name__)
        compare(tag, tripod, ckpt, m, prompt)

    print(f"{'ALL PASS' if not failures else 'FAILED: ' + ', '.join(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
