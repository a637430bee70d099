#!/usr/bin/env python3
"""A plain Llama forward in PyTorch (float64) on a Hugging Face
LlamaForCausalLM or Qwen3ForCausalLM folder (Qwen3: q_norm / k_norm, an
RMSNorm over each query and key head before RoPE), written from the Llama architecture with HF's
tensor names and conventions (y = x W^T; RoPE by rotate_half with
rope_theta; K/V head j serving query heads j*k .. j*k + k - 1; lm_head, or
embed_tokens when tied); no transformers import. Reads model.safetensors
with its own parser.

usage: hf_llama_forward.py HF_DIR TOKENS_TXT OUT_BIN
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
    assert cfg["architectures"] in (["LlamaForCausalLM"], ["Qwen3ForCausalLM"]), cfg["architectures"]
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
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(g * torch.sigmoid(g) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = x @ head.T
    with open(out_bin, "wb") as f:
        f.write(logits.contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
