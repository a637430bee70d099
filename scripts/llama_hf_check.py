#!/usr/bin/env python3
"""tripod's Llama family against Hugging Face transformers (run on a machine
with torch and transformers; tripod's own steps run on the CPU, fp32).

1. Import: a random LlamaForCausalLM (grouped-query attention, untied; and a
   second one with multi-head attention, tied embeddings, rope_theta 500000)
   saved with save_pretrained -> `tripod convert --import-hf` -> `tripod
   generate --prompt-ids --greedy --logits-out`: the prompt's logits match
   transformers' within LOGIT_TOL (relative to the largest logit) and the
   greedy continuation is the same ids as model.generate(do_sample=False).
2. Export: `tripod train` a few iterations of a Llama-family model (mock data)
   -> `tripod convert --export-hf` -> LlamaForCausalLM.from_pretrained: the
   same two comparisons against `tripod generate` on the trained checkpoint.

usage: llama_hf_check.py TRIPOD_BIN WORK_DIR
Prints one PASS/FAIL line per comparison and exits non-zero on any FAIL.
"""
import inspect
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

LOGIT_TOL = 1e-4  # fp32 both sides; differences are summation order only
NEW_TOKENS = 16
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


def random_llama(path, seed, rope_theta, **kw):
    torch.manual_seed(seed)
    # transformers 5 takes rope_parameters; 4 takes rope_theta.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
    else:
        kw["rope_theta"] = rope_theta
    cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      max_position_embeddings=128, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
                      mlp_bias=False, initializer_range=0.05, **kw)
    m = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():  # norm gains away from 1 so that a mixed-up norm shows
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    try:  # one model.safetensors (tripod reads no sharded or .bin checkpoints)
        m.save_pretrained(path, safe_serialization=True, max_shard_size="100GB")
    except TypeError:  # a transformers without safe_serialization (always safetensors)
        m.save_pretrained(path, max_shard_size="100GB")
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
    for i, (tag, kw) in enumerate(cases):
        hf_dir, ckpt = os.path.join(work, tag + "_hf"), os.path.join(work, tag + "_ckpt")
        m = random_llama(hf_dir, 100 + i, **kw)
        run([tripod, "convert", "--import-hf", hf_dir, "--save", ckpt])
        compare(tag, tripod, ckpt, m, prompt)

    # 2. Export of a model tripod trained.
    ckpt, hf_dir = os.path.join(work, "trained_ckpt"), os.path.join(work, "trained_hf")
    run([tripod, "train", "--device", "cpu", "--num-layers", "2", "--hidden-size", "128", "--num-attention-heads",
         "8", "--group-query-attention", "--num-query-groups", "2", "--position-embedding-type", "rope",
         "--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "256", "--untie-embeddings-and-output-weights",
         "--disable-bias-linear", "--seq-length", "64", "--mock-data", "--vocab-size", "1000", "--micro-batch-size",
         "4", "--train-iters", "20", "--lr", "3e-3", "--log-interval", "10", "--eval-interval", "0", "--save", ckpt])
    run([tripod, "convert", "--load", ckpt, "--export-hf", hf_dir])
    m = LlamaForCausalLM.from_pretrained(hf_dir).float().eval()
    compare("export_trained", tripod, ckpt, m, prompt)

    print(f"{'ALL PASS' if not failures else 'FAILED: ' + ', '.join(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
