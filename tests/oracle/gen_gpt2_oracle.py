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
import struct
import sys

import torch

MAGIC, FIXTURE_VERSION = 20261202, 1
L, C, NH, T, V, B_MICRO, N_MICRO, STEPS = 2, 64, 4, 32, 500, 2, 2, 3
VP = 512  # Megatron padding of 500 to a multiple of 128
GBS = B_MICRO * N_MICRO
LR, MIN_LR, WARMUP, DECAY_ITERS = 1e-3, 1e-4, 1, 3
WD, CLIP, BETA1, BETA2, EPS = 0.1, 0.5, 0.9, 0.95, 1e-4
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


def lr_at(n):  # Megatron OptimizerParamScheduler.get_lr, counted in iterations
    if WARMUP > 0 and n <= WARMUP:
        return LR * n / WARMUP
    if n > DECAY_ITERS:
        return MIN_LR
    ratio = (n - WARMUP) / (DECAY_ITERS - WARMUP)
    return MIN_LR + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (LR - MIN_LR)


def main(out_path):
    P = init_params()
    init = {n: t.detach().clone() for n, t in P.items()}
    batches = [torch.randint(0, V, (GBS, T + 1), dtype=torch.int32) for _ in range(STEPS)]
    m = {n: torch.zeros_like(t) for n, t in P.items()}
    v = {n: torch.zeros_like(t) for n, t in P.items()}
    records, losses, norms, grads0 = [], [], [], None
    with torch.no_grad():
        logits0 = forward(P, batches[0][:B_MICRO, :T].long())
    for step in range(STEPS):
        for t in P.values():
            t.grad = None
        tok = batches[step].long()
        logits = forward(P, tok[:, :T])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VP), tok[:, 1:].reshape(-1))
        loss.backward()
        norm = math.sqrt(sum(float((t.grad ** 2).sum()) for t in P.values()))
        losses.append(float(loss))
        norms.append(norm)
        if step == 0:
            grads0 = {n: t.grad.detach().clone() for n, t in P.items()}
        clip = CLIP / (norm + 1e-6) if CLIP / (norm + 1e-6) < 1.0 else 1.0
        lr = lr_at(step)
        with torch.no_grad():
            for n, p in P.items():
                g = p.grad * clip
                decay = WD if (p.dim() > 1) else 0.0
                m[n].mul_(BETA1).add_((1 - BETA1) * g)
                v[n].mul_(BETA2).add_((1 - BETA2) * g * g)
                mhat = m[n] / (1 - BETA1 ** (step + 1))
                vhat = v[n] / (1 - BETA2 ** (step + 1))
                p.sub_(lr * (mhat / (vhat.sqrt() + EPS) + decay * p))

    def rec(name, t):
        t = t.detach().contiguous()
        dt = 1 if t.dtype == torch.int32 else 0
        data = t.numpy().astype("<i4" if dt else "<f8").tobytes()
        nb = name.encode()
        return (struct.pack("<i", len(nb)) + nb + struct.pack("<ii", dt, t.dim()) +
                struct.pack(f"<{t.dim()}q", *t.shape) + data)

    for s, b in enumerate(batches):
        records.append(rec(f"tokens.{s}", b))
    for n, t in init.items():
        records.append(rec("init." + n, t))
    records.append(rec("logits0", logits0))
    for n, t in grads0.items():
        records.append(rec("grad." + n, t))
    for n, t in P.items():
        records.append(rec("final." + n, t))
    records.append(rec("losses", torch.tensor(losses)))
    records.append(rec("grad_norms", torch.tensor(norms)))
    header = struct.pack("<ii", MAGIC, FIXTURE_VERSION)
    header += struct.pack("<9i", L, C, NH, T, V, VP, B_MICRO, N_MICRO, STEPS)
    header += struct.pack("<9d", LR, MIN_LR, WARMUP, DECAY_ITERS, WD, CLIP, BETA1, BETA2, EPS)
    with open(out_path, "wb") as f:
        f.write(header + b"".join(records))
    print(f"wrote {out_path}: losses {losses}, grad norms {norms}")


if __name__ == "__main__":
    main(sys.argv[1])
