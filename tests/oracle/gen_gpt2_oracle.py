#!/usr/bin/env python3
# Generates the PyTorch oracle fixture for tests/oracle/test_gpt2_oracle.cpp.
#
# A float64 GPT-2 written independently of tripod (pre-LayerNorm blocks,
# tanh GELU, causal attention, learned positions, output layer tied to the
# word embedding, padded vocab), Megatron's AdamW semantics (no decay on
# biases/LayerNorm, global-norm clipping, linear warmup then cosine decay,
# the first iteration at lr_at(0)). Writes: the initial weights, the logits
# and loss of the first micro-batch, the gradient of the first iteration,
# per-iteration loss and grad norm, and the weights after the last step.
#
# Usage: /usr/bin/python3 gen_gpt2_oracle.py OUT.bin
# Format (little-endian): int32 magic 20261202, int32 version FIXTURE_VERSION,
# int32[9] config, float64[9] hyper-parameters, then records
# (int32 name length, name, int32 dtype 0=f64 1=i32, int32 ndim, int64 dims, data).
import math
import sys

import torch

from oracle_train import B_MICRO, STEPS, T, V, VP, N_MICRO, train_and_write  # same folder

FIXTURE_VERSION = 1
L, C, NH = 2, 64, 4
torch.manual_seed(20261202)
torch.set_default_dtype(torch.float64)


def names():
    out = ["embedding.word_embeddings.weight", "embedding.position_embeddings.weight"]
    for l in range(L):
        p = f"decoder.layers.{l}."
        out += [p + s for s in ["input_layernorm.weight", "input_layernorm.bias",
                                "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
                                "self_attention.linear_proj.weight", "self_attention.linear_proj.bias",
                                "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
                                "mlp.linear_fc1.weight", "mlp.linear_fc1.bias",
                                "mlp.linear_fc2.weight", "mlp.linear_fc2.bias"]]
    return out + ["decoder.final_layernorm.weight", "decoder.final_layernorm.bias"]


def init_params():
    P = {}
    for n in names():
        if n.startswith("embedding.word"):
            shape = (VP, C)
        elif n.startswith("embedding.position"):
            shape = (T, C)
        elif "linear_qkv.weight" in n:
            shape = (3 * C, C)
        elif "linear_qkv.bias" in n:
            shape = (3 * C,)
        elif "linear_proj.weight" in n:
            shape = (C, C)
        elif "linear_fc1.weight" in n:
            shape = (4 * C, C)
        elif "linear_fc1.bias" in n:
            shape = (4 * C,)
        elif "linear_fc2.weight" in n:
            shape = (C, 4 * C)
        else:
            shape = (C,)
        if n.endswith("layernorm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape)
        elif len(shape) == 1:
            t = 0.02 * torch.randn(shape)
        else:
            t = 0.05 * torch.randn(shape)
        P[n] = t.requires_grad_(True)
    return P


def layernorm(x, w, b):
    return torch.nn.functional.layer_norm(x, (C,), w, b, 1e-5)


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(P, tokens):  # tokens (B, T) -> logits (B, T, VP)
    Bn = tokens.shape[0]
    x = P["embedding.word_embeddings.weight"][tokens] + P["embedding.position_embeddings.weight"][:T]
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"decoder.layers.{l}."
        h = layernorm(x, P[p + "input_layernorm.weight"], P[p + "input_layernorm.bias"])
        qkv = h @ P[p + "self_attention.linear_qkv.weight"].T + P[p + "self_attention.linear_qkv.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = [t.view(Bn, T, NH, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, T, C)
        x = x + y @ P[p + "self_attention.linear_proj.weight"].T + P[p + "self_attention.linear_proj.bias"]
        h = layernorm(x, P[p + "pre_mlp_layernorm.weight"], P[p + "pre_mlp_layernorm.bias"])
        h = gelu(h @ P[p + "mlp.linear_fc1.weight"].T + P[p + "mlp.linear_fc1.bias"])
        x = x + h @ P[p + "mlp.linear_fc2.weight"].T + P[p + "mlp.linear_fc2.bias"]
    x = layernorm(x, P["decoder.final_layernorm.weight"], P["decoder.final_layernorm.bias"])
    return x @ P["embedding.word_embeddings.weight"].T


def main(out_path):
    train_and_write(out_path, init_params(), forward, (L, C, NH, T, V, VP, B_MICRO, N_MICRO, STEPS), FIXTURE_VERSION)

if __name__ == "__main__":
    main(sys.argv[1])
