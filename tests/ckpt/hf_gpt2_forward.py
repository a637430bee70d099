#!/usr/bin/env python3
"""A plain GPT-2 forward in PyTorch (float64) on a Hugging Face GPT-2 folder,
written from the GPT-2 architecture with HF's tensor names and Conv1D
convention (y = x W + b, W of shape (in, out)); no transformers import.
Reads model.safetensors with its own parser.

usage: hf_gpt2_forward.py HF_DIR TOKENS_TXT OUT_BIN
  TOKENS_TXT: whitespace-separated token ids; OUT_BIN: (T, vocab) float64 logits.
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}


def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).to(torch.float64)
    return out


def load_folder(hf_dir):
    """model.safetensors, or the shards model.safetensors.index.json names."""
    import os
    if os.path.exists(f"{hf_dir}/model.safetensors"):
        return load_safetensors(f"{hf_dir}/model.safetensors")
    weight_map = json.load(open(f"{hf_dir}/model.safetensors.index.json"))["weight_map"]
    out = {}
    for shard in sorted(set(weight_map.values())):
        out.update(load_safetensors(f"{hf_dir}/{shard}"))
    assert set(out) == set(weight_map), "the shards do not hold the index's tensors"
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def main():
    hf_dir, tokens_txt, out_bin = sys.argv[1:4]
    cfg = json.load(open(f"{hf_dir}/config.json"))
    w = load_folder(hf_dir)
    C, L, NH = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    eps = cfg["layer_norm_epsilon"]
    HS = C // NH
    tokens = torch.tensor([int(t) for t in open(tokens_txt).read().split()])
    T = tokens.numel()
    assert w["wte.weight"].shape == (cfg["vocab_size"], C)
    x = w["wte.weight"][tokens] + w["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # (T, 3C)
        q, k, v = (t.reshape(T, NH, HS).transpose(0, 1) for t in qkv.split(C, dim=-1))  # (NH, T, HS)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        x = x + gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] \
            + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x @ w["wte.weight"].T  # tied output layer
    with open(out_bin, "wb") as f:
        f.write(logits.contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
