#!/usr/bin/env python3
"""tripod's Mixtral, Qwen2-MoE and Qwen3-MoE interop against Hugging Face transformers
(run on a machine with torch and transformers; tripod's own steps run on the
CPU, fp32: the CUDA backend has no MoE ops yet).

1. Import: a random MixtralForCausalLM (every layer MoE, top-2 of 4, GQA,
   untied) and a random Qwen2MoeForCausalLM (top-2 of 4 without
   renormalising, a gated shared expert, layer 0 dense by mlp_only_layers,
   tied embeddings), and a random Qwen3MoeForCausalLM (q_norm / k_norm,
   top-2 of 4 renormalised, layer 0 dense) saved with save_pretrained in
   shards (max_shard_size SHARD) -> `tripod convert
   --import-hf` -> `tripod generate --prompt-ids --greedy --logits-out`: the
   prompt's logits match transformers' within LOGIT_TOL (relative to the
   largest logit) and the greedy continuation is model.generate's.
2. Export: `tripod train` a few iterations of the same two kinds of model
   and of a Qwen3-MoE (--qk-layernorm; exported in shards with
   --max-shard-size SHARD) -> `tripod convert --export-hf` ->
   from_pretrained: the same two comparisons against `tripod generate` on
   the trained checkpoint.
3. The float64 oracle (tests/ckpt/hf_moe_forward.py, HF's definitions with
   no transformers import) on the exported folders agrees with transformers.

usage: hf_moe_check.py TRIPOD_BIN WORK_DIR
Prints one PASS/FAIL line per comparison and exits non-zero on any FAIL.
"""
import inspect
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM

try:  # transformers >= 4.51
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
except ImportError:
    Qwen3MoeConfig = Qwen3MoeForCausalLM = None

LOGIT_TOL = 1e-4  # fp32 both sides; differences are summation order only
NEW_TOKENS = 16
SHARD = "300KB"  # these 2-layer models of 2-4 MB in several shards
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
    out = run([tripod, "generate", "--device", "cpu", "--load", ckpt, "--prompt-ids", ",".join(map(str, prompt)),
               "--greedy",
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


def save(m, path):
    try:  # in shards, as hub checkpoints above 5GB are
        m.save_pretrained(path, safe_serialization=True, max_shard_size=SHARD)
    except TypeError:  # a transformers without safe_serialization (always safetensors)
        m.save_pretrained(path, max_shard_size=SHARD)
    shards = [f for f in os.listdir(path) if f.startswith("model-") and f.endswith(".safetensors")]
    check(f"{os.path.basename(path)} saved in shards", len(shards) > 1 and
          os.path.exists(os.path.join(path, "model.safetensors.index.json")), f"{len(shards)} shards")


def rope_kw(cls, theta):  # transformers 5 takes rope_parameters; 4 takes rope_theta
    if "rope_parameters" in inspect.signature(cls.__init__).parameters:
        return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}
    return {"rope_theta": theta}


def random_moe(path, seed, kind):
    torch.manual_seed(seed)
    common = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, hidden_act="silu",
                  initializer_range=0.05, num_experts_per_tok=2)
    if kind == "qwen3":
        cfg = Qwen3MoeConfig(num_experts=4, moe_intermediate_size=96, intermediate_size=192, norm_topk_prob=True,
                             decoder_sparse_step=1, mlp_only_layers=[0], use_sliding_window=False,
                             tie_word_embeddings=False, head_dim=16, attention_bias=False,
                             **rope_kw(Qwen3MoeConfig, 1000000.0), **common)
        m = Qwen3MoeForCausalLM(cfg)
    elif kind == "qwen2":
        cfg = Qwen2MoeConfig(num_experts=4, moe_intermediate_size=96, intermediate_size=192,
                             shared_expert_intermediate_size=64, norm_topk_prob=False, decoder_sparse_step=1,
                             mlp_only_layers=[0], use_sliding_window=False, tie_word_embeddings=True,
                             **rope_kw(Qwen2MoeConfig, 1000000.0), **common)
        m = Qwen2MoeForCausalLM(cfg)
    else:
        cfg = MixtralConfig(num_local_experts=4, intermediate_size=96, tie_word_embeddings=False,
                            sliding_window=None, router_jitter_noise=0.0, **rope_kw(MixtralConfig, 10000.0),
                            **common)
        m = MixtralForCausalLM(cfg)
    m = m.float().eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:  # norm gains away from 1 so that a mixed-up norm shows (q_norm / k_norm too)
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
                p.zero_()  # tripod has no q/k/v biases (a non-zero one is refused on import)
            elif "gate" in name and "proj" not in name and p.dim() == 2 and p.shape[0] > 1:
                p.mul_(20.0)  # routers far from uniform: a wrong routing shows in the logits
    save(m, path)
    return m


def oracle(tag, hf_dir, hf_model, prompt):
    ref = os.path.join(hf_dir, "oracle.bin")
    tok = os.path.join(hf_dir, "tokens.txt")
    open(tok, "w").write(" ".join(map(str, prompt)))
    here = os.path.dirname(os.path.abspath(__file__))
    run([sys.executable, os.path.join(here, "..", "tests", "ckpt", "hf_moe_forward.py"), hf_dir, tok, ref])
    ours = np.fromfile(ref, dtype="<f8").reshape(len(prompt), -1)
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].double().numpy()
    diff = float(np.abs(ours - theirs).max())
    check(f"{tag} float64 oracle vs transformers", diff <= LOGIT_TOL * max(float(np.abs(theirs).max()), 1.0),
          f"max difference {diff:.3e}")


def main():
    tripod, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    prompt = [3, 17, 256, 999, 42, 7, 500, 123, 64, 1]

    # 1. Import.
    kinds = [("import_mixtral", "mixtral"), ("import_qwen2_moe", "qwen2")]
    if Qwen3MoeForCausalLM is not None:
        kinds.append(("import_qwen3_moe", "qwen3"))
    else:
        check("Qwen3MoeForCausalLM in transformers", False, "this transformers has no Qwen3-MoE (>= 4.51 needed)")
    for i, (tag, kind) in enumerate(kinds):
        hf_dir, ckpt = os.path.join(work, tag + "_hf"), os.path.join(work, tag + "_ckpt")
        m = random_moe(hf_dir, 100 + i, kind)
        run([tripod, "convert", "--import-hf", hf_dir, "--save", ckpt])
        compare(tag, tripod, ckpt, m, prompt)

    # 2. Export of models tripod trained; 3. the oracle on them.
    base = ["--device", "cpu", "--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "8",
            "--group-query-attention", "--num-query-groups", "2", "--position-embedding-type", "rope",
            "--normalization", "RMSNorm", "--swiglu", "--untie-embeddings-and-output-weights",
            "--disable-bias-linear", "--seq-length", "64", "--mock-data", "--vocab-size", "1000",
            "--micro-batch-size", "4", "--train-iters", "20", "--lr", "3e-3", "--log-interval", "10",
            "--eval-interval", "0", "--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "1e-2"]
    kinds = [("export_mixtral", ["--ffn-hidden-size", "96"]),
             ("export_qwen2_moe", ["--ffn-hidden-size", "192", "--moe-ffn-hidden-size", "96",
                                   "--moe-router-pre-softmax", "--moe-shared-expert-intermediate-size", "64",
                                   "--moe-shared-expert-gate", "--moe-layer-freq", "[0,1]"])]
    if Qwen3MoeForCausalLM is not None:
        kinds.append(("export_qwen3_moe", ["--qk-layernorm", "--ffn-hidden-size", "192", "--moe-ffn-hidden-size", "96",
                                           "--moe-layer-freq", "[0,1]"]))
    want = {"export_mixtral": "MixtralForCausalLM", "export_qwen2_moe": "Qwen2MoeForCausalLM",
            "export_qwen3_moe": "Qwen3MoeForCausalLM"}
    for tag, extra in kinds:
        ckpt, hf_dir = os.path.join(work, tag + "_ckpt"), os.path.join(work, tag + "_hf")
        run([tripod, "train", *base, *extra, "--save", ckpt])
        shard = ["--max-shard-size", SHARD] if tag == "export_qwen3_moe" else []
        run([tripod, "convert", "--load", ckpt, "--export-hf", hf_dir, *shard])
        m = AutoModelForCausalLM.from_pretrained(hf_dir).float().eval()
        check(f"{tag} class", type(m).__name__ == want[tag], type(m).__name__)
        compare(tag, tripod, ckpt, m, prompt)
        oracle(tag, hf_dir, m, prompt)

    print(f"{'ALL PASS' if not failures else 'FAILED: ' + ', '.join(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
