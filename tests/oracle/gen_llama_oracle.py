#!/usr/bin/env python3
# Generates the PyTorch oracle fixture of the Llama-family model for
# tests/oracle/test_gpt2_oracle.cpp (run with the fixture as its argument).
#
# A float64 Llama written independently of tripod: RMSNorm, rotary position
# embedding on q and k (rotate-half convention, as Hugging Face's Llama and
# Megatron-core), grouped-query attention (8 query heads sharing 2 K/V
# heads), SwiGLU MLP (fc1 = [gate | up], silu(gate) * up), no biases, an
# output layer of its own (untied), padded vocab. The fused qkv weight is in
# Megatron's per-group layout (G, k+2, HS, C): per group its k query heads,
# then its K and V head. Megatron's AdamW semantics as gen_gpt2_oracle.py
# (no decay on the norms, global-norm clipping, warmup then cosine decay).
#
# Usage: /usr/bin/python3 gen_llama_oracle.py OUT.bin
# Format: as gen_gpt2_oracle.py with version 2 and int32[12] config
# (L, C, NH, T, V, VP, B_MICRO, N_MICRO, STEPS, G, F, ROTARY_BASE).
import math
import sys

import torch

from oracle_train import B_MICRO, STEPS, T, V, VP, N_MICRO, train_and_write  # same folder

FIXTURE_VERSION = 2
L, C, NH, G, F = 2, 64, 8, 2, 96
HS, KH = C // NH, NH // G  # head size, query heads per group
ROTARY_BASE, NORM_EPS = 10000, 1e-5
torch.manual_seed(20261203)
torch.set_default_dtype(torch.float64)


def shapes():
    out = {"embedding.word_embeddings.weight": (VP, C)}
    for l in range(L):
        p = f"decoder.layers.{l}."
        out[p + "input_layernorm.weight"] = (C,)
        out[p + "self_attention.linear_qkv.weight"] = (G, KH + 2, HS, C)
        out[p + "self_attention.linear_proj.weight"] = (C, C)
        out[p + "pre_mlp_layernorm.weight"] = (C,)
        out[p + "mlp.linear_fc1.weight"] = (2 * F, C)
        out[p + "mlp.linear_fc2.weight"] = (C, F)
    out["decoder.final_layernorm.weight"] = (C,)
    out["output_layer.weight"] = (VP, C)
    return out


def init_params():
    P = {}
    for n, shape in shapes().items():
        if n.endswith("layernorm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape)
        else:
            t = 0.05 * torch.randn(shape)
        P[n] = t.requires_grad_(True)
    return P


def rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + NORM_EPS) * w


def rope(x):  # x (B, heads, T, HS): rotate halves by position * base^(-2i/HS)
    inv = ROTARY_BASE ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # (T, HS/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(P, tokens):  # tokens (B, T) -> logits (B, T, VP)
    Bn = tokens.shape[0]
    x = P["embedding.word_embeddings.weight"][tokens]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"decoder.layers.{l}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"])
        qkv = (h @ P[p + "self_attention.linear_qkv.weight"].reshape(-1, C).T).view(Bn, T, G, KH + 2, HS)
        q = qkv[:, :, :, :KH, :].reshape(Bn, T, NH, HS).transpose(1, 2)  # query head g*KH + j
        k = qkv[:, :, :, KH, :].transpose(1, 2)                          # (B, G, T, HS)
        v = qkv[:, :, :, KH + 1, :].transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(KH, dim=1), v.repeat_interleave(KH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, T, C)
        x = x + y @ P[p + "self_attention.linear_proj.weight"].T
        h = rmsnorm(x, P[p + "pre_mlp_layernorm.weight"])
        gate, up = (h @ P[p + "mlp.linear_fc1.weight"].T).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ P[p + "mlp.linear_fc2.weight"].T
    x = rmsnorm(x, P["decoder.final_layernorm.weight"])
    return x @ P["output_layer.weight"].T


def main(out_path):
    train_and_write(out_path, init_params(), forward, (L, C, NH, T, V, VP, B_MICRO, N_MICRO, STEPS, G, F, ROTARY_BASE), FIXTURE_VERSION)

if __name__ == "__main__":
    main(sys.argv[1])
