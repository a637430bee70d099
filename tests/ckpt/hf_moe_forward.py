#!/usr/bin/env python3
"""A plain mixture-of-experts forward in PyTorch (float64) on a Hugging Face
MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM folder (one
file or shards), written from the three architectures with HF's tensor names (the per-expert hub layout), no
transformers import; the attention is hf_llama_forward.py's (plus
Qwen2-MoE's q/k/v biases). Per token, MoE layer:
  Mixtral:   p = softmax(x Wg^T); the top k of p, renormalised to sum 1;
             y = sum_j p_j down_j(silu(gate_j x) * up_j x)
  Qwen2-MoE: p = softmax(x Wg^T); the top k of p, renormalised only with
             norm_topk_prob; y = sum_j p_j expert_j(x)
             + sigmoid(x g^T) shared_expert(x); the layers in mlp_only_layers
             or not a multiple of decoder_sparse_step are dense (mlp.*_proj).
  Qwen3-MoE: Qwen2-MoE's routing without a shared expert; q_norm / k_norm
             (RMSNorm over each query and key head) before RoPE.
Ties in the top k go to the lower expert index (torch.topk on CPU).

usage: hf_moe_forward.py HF_DIR TOKENS_TXT OUT_BIN
  TOKENS_TXT: whitespace-separated token ids; OUT_BIN: (T, vocab) float64 logits.
"""
import json
import math
import sys

import torch

from hf_gpt2_forward import load_folder  # same folder: the safetensors parser (one file or shards)


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def main():
    hf_dir, tokens_txt, out_bin = sys.argv[1:4]
    cfg = json.load(open(f"{hf_dir}/config.json"))
    arch = cfg["architectures"][0]
    assert arch in ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"), arch
    mixtral = arch == "MixtralForCausalLM"
    E = cfg["num_local_experts"] if mixtral else cfg["num_experts"]
    K = cfg["num_experts_per_tok"]
    renorm = mixtral or cfg.get("norm_topk_prob", False)
    step, dense_layers = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers", [])
    w = load_folder(hf_dir)
    C, L, NH = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    KV, eps, theta = cfg["num_key_value_heads"], cfg["rms_norm_eps"], cfg["rope_theta"]
    HS = C // NH
    tokens = torch.tensor([int(t) for t in open(tokens_txt).read().split()])
    T = tokens.numel()
    inv = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(t):  # (heads, T, HS)
        return t * cos + torch.cat([-t[..., HS // 2:], t[..., :HS // 2]], -1) * sin

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def swiglu(h, gate, up, down):
        g = lin(h, gate)
        return lin(g * torch.sigmoid(g) * lin(h, up), down)

    def mlp(h, i):
        p = f"model.layers.{i}."
        if not mixtral and (i in dense_layers or (i + 1) % step != 0):
            return swiglu(h, p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj")
        blk = p + ("block_sparse_moe." if mixtral else "mlp.")
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        probs = lin(h, blk + "gate").softmax(-1)  # (T, E)
        top, idx = probs.topk(K, dim=-1)
        if renorm:
            top = top / top.sum(-1, keepdim=True)
        y = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(K):
                e = int(idx[t, j])
                y[t] += top[t, j] * swiglu(h[t:t + 1], *(f"{blk}experts.{e}.{n}" for n in names))[0]
        if not mixtral and cfg.get("shared_expert_intermediate_size", 0) > 0:
            s = p + "mlp.shared_expert."
            y = y + torch.sigmoid(lin(h, p + "mlp.shared_expert_gate")) * swiglu(
                h, s + "gate_proj", s + "up_proj", s + "down_proj")
        return y

    x = w["model.embed_tokens.weight"][tokens]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj").reshape(T, NH, HS).transpose(0, 1)
        k = lin(h, p + "self_attn.k_proj").reshape(T, KV, HS).transpose(0, 1)
        v = lin(h, p + "self_attn.v_proj").reshape(T, KV, HS).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3: RMSNorm over each head's HS values, before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(NH // KV, dim=0), v.repeat_interleave(NH // KV, dim=0)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + lin(y, p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + mlp(h, i)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = x @ head.T
    with open(out_bin, "wb") as f:
        f.write(logits.contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
