#!/usr/bin/env python3
# Generates the PyTorch oracle fixture of a mixture-of-experts Llama for
# tests/oracle/test_gpt2_oracle.cpp (run with the fixture as its argument;
# a fixture name containing "mixtral" picks the Mixtral variant).
#
# gen_llama_oracle.py's model with MoE MLPs written from Megatron-core's and
# Hugging Face's definitions (moe_utils.py topk_routing_with_score_function,
# switch_load_balancing_loss_func, z_loss_func; HF MixtralSparseMoeBlock and
# Qwen2MoeSparseMoeBlock), token by token:
#   Mixtral:   every layer MoE, E experts, top-K of the router logits then a
#              softmax over the K (= HF's softmax, top-K, renormalise);
#   Qwen2-MoE: layer 0 dense, layer 1 MoE: softmax over all E then the top K
#              (no renormalising), plus a shared SwiGLU expert times
#              sigmoid(x g^T).
# The objective adds, per micro-batch and MoE layer, Megatron's
# load-balancing loss AUX E / (K N^2) sum_e tokens_e sum_t softmax(logits)_te
# and the z-loss Z mean_t logsumexp(logits_t)^2, averaged over the
# micro-batches (MoEAuxLossAutoScaler's scale); the recorded losses are the
# language-model loss only. Dropless; no ties (random weights).
#
# Version 3 config: int32[20] = version 2's 12, then E, K, FE, FS (0: no
# shared expert), PRE_SOFTMAX, AUX and Z in millionths, the MoE-layer mask.
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
# Usage: /usr/bin/python3 gen_moe_oracle.py OUT.bin
import math
import sys

import torch

from oracle_train import B_MICRO, STEPS, T, V, VP, N_MICRO, train_and_write  # same folder

FIXTURE_VERSION = 3
L, C, NH, G, F = 2, 64, 8, 2, 96
E, K, FE = 4, 2, 48
AUX, Z = 0.1, 0.01  # large enough that their gradients show
MIXTRAL = "mixtral" in (sys.argv[1] if len(sys.argv) > 1 else "")
FS, PRE_SOFTMAX = (0, 0) if MIXTRAL else (40, 1)
MOE_LAYERS = [0, 1] if MIXTRAL else [1]
HS, KH = C // NH, NH // G  # head size, query heads per group
ROTARY_BASE, NORM_EPS = 10000, 1e-5
torch.manual_seed(20261204)
torch.set_default_dtype(torch.float64)


def shapes():
    out = {"embedding.word_embeddings.weight": (VP, C)}
    for l in range(L):
        p = f"decoder.layers.{l}."
        out[p + "input_layernorm.weight"] = (C,)
        out[p + "self_attention.linear_qkv.weight"] = (G, KH + 2, HS, C)
        out[p + "self_attention.linear_proj.weight"] = (C, C)
        out[p + "pre_mlp_layernorm.weight"] = (C,)
        if l not in MOE_LAYERS:
            out[p + "mlp.linear_fc1.weight"] = (2 * F, C)
            out[p + "mlp.linear_fc2.weight"] = (C, F)
            continue
        out[p + "mlp.router.weight"] = (E, C)
        for e in range(E):
            out[p + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = (2 * FE, C)
            out[p + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = (C, FE)
        if FS:
            out[p + "mlp.shared_experts.linear_fc1.weight"] = (2 * FS, C)
            out[p + "mlp.shared_experts.linear_fc2.weight"] = (C, FS)
            out[p + "mlp.shared_experts.gate_weight"] = (1, C)
    out["decoder.final_layernorm.weight"] = (C,)
    out["output_layer.weight"] = (VP, C)
    return out


def init_params():
    P = {}
    for n, shape in shapes().items():
        if n.endswith("layernorm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape)
        elif n.endswith("router.weight"):
            t = 0.5 * torch.randn(shape)
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


def swiglu(h, w1, w2):
    gate, up = (h @ w1.T).chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up) @ w2.T


def moe(P, p, h, n_micro):  # h (N, C) -> (y (N, C), this layer's aux + z loss averaged over micro-batches)
    logits = h @ P[p + "mlp.router.weight"].T  # (N, E)
    if PRE_SOFTMAX:  # Qwen2-MoE: softmax over E, then the top K
        probs, idx = logits.softmax(-1).topk(K, dim=-1)
    else:  # Mixtral: the top K logits, then softmax over them
        top, idx = logits.topk(K, dim=-1)
        probs = top.softmax(-1)
    y = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(K):
            e = int(idx[t, j])
            q = p + f"mlp.experts.local_experts.{e}."
            y[t] = y[t] + probs[t, j] * swiglu(h[t], P[q + "linear_fc1.weight"], P[q + "linear_fc2.weight"])
    if FS:
        q = p + "mlp.shared_experts."
        y = y + torch.sigmoid(h @ P[q + "gate_weight"].T) * swiglu(h, P[q + "linear_fc1.weight"],
                                                                   P[q + "linear_fc2.weight"])
    loss = 0.0
    for lg, ix in zip(logits.chunk(n_micro), idx.chunk(n_micro)):  # per micro-batch of N tokens
        N = lg.shape[0]
        tokens_per_expert = torch.zeros(E).index_add_(0, ix.reshape(-1), torch.ones(ix.numel()))
        aux = E / (K * N * N) * (tokens_per_expert * lg.softmax(-1).sum(0)).sum()
        z = (torch.logsumexp(lg, -1) ** 2).mean()
        loss = loss + (AUX * aux + Z * z) / n_micro
    return y, loss


def forward(P, tokens):  # tokens (B, T) -> logits (B, T, VP), the MoE losses
    Bn = tokens.shape[0]
    n_micro = Bn // B_MICRO
    extra = 0.0
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
        if l in MOE_LAYERS:  # tokens in (micro-batch, sequence, position) order
            y, loss = moe(P, p, h.reshape(-1, C), n_micro)
            x, extra = x + y.view(Bn, T, C), extra + loss
        else:
            x = x + swiglu(h, P[p + "mlp.linear_fc1.weight"], P[p + "mlp.linear_fc2.weight"])
    x = rmsnorm(x, P["decoder.final_layernorm.weight"])
    return x @ P["output_layer.weight"].T, extra


def main(out_path):
    mask = sum(1 << l for l in MOE_LAYERS)
    train_and_write(out_path, init_params(), forward,
                    (L, C, NH, T, V, VP, B_MICRO, N_MICRO, STEPS, G, F, ROTARY_BASE, E, K, FE, FS, PRE_SOFTMAX,
                     round(AUX * 1e6), round(Z * 1e6), mask), FIXTURE_VERSION)

if __name__ == "__main__":
    main(sys.argv[1])
