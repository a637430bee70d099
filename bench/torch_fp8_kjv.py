#!/usr/bin/env python3
# Convergence peer for FP8 training in PyTorch: GPT-2 124M on a Megatron-format
# dataset (scripts/prepare_kjv.sh), bf16 against FP8 through torch._scaled_mm,
# with the recipe tripod and Transformer Engine use: per-tensor scales, E4M3
# forward operands (x, W), E5M2 gradients (hybrid) or E4M3 (e4m3), f32
# accumulation (also in the forward GEMM, where tripod and Transformer Engine
# use Hopper's fast accumulation), delayed scaling with an amax history of one (the scale of step
# t comes from the amax of step t-1; the value is saturated if it grew) or
# current scaling (tensorwise). The FP8 GEMMs are qkv, proj, fc1 and fc2 of each
# layer; embedding, output layer, norms, attention and loss stay bf16, as in
# tripod. The question it answers: how far does an independent FP8
# implementation trail its own bf16 on the same data and schedule? tripod's
# FP8 and bf16 curves are judged against that gap (bench/RESULTS.md).
#
# The data order is Megatron's in kind, not in detail (the split's documents
# shuffled per epoch with --data-seed, cut into seq+1 windows, windows
# shuffled), so the curves compare with the peer's own bf16 run, not with
# tripod's. Hyperparameters follow tripod's KJV check: AdamW (0.9, 0.999,
# 1e-8), lr 6e-4 warm-up 100 then cosine to 6e-5, weight decay 0.1 on matrices,
# clip 1.0, micro-batch 16 = global batch, GPT-2 init (std 0.02, residual
# projections 0.02 / sqrt(2 L)), tied embeddings, vocabulary padded to 50304.
#
# usage: torch_fp8_kjv.py DATA_PREFIX OUT.jsonl [--fp8 none|delayed|current]
#        [--format hybrid|e4m3] [--iters 2000] [--seed 1234] [--data-seed 1234]
import argparse, json, math, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("data"); p.add_argument("out")
p.add_argument("--fp8", default="none", choices=["none", "delayed", "current"])
p.add_argument("--format", default="hybrid", choices=["hybrid", "e4m3"])
p.add_argument("--iters", type=int, default=2000)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--data-seed", type=int, default=1234)
p.add_argument("--log-interval", type=int, default=10)
a = p.parse_args()
L, C, H, T, B, V = 12, 768, 12, 1024, 16, 50304
dev = "cuda"


def load_tokens(prefix):
    """Megatron MMIDIDX v1: the train split's documents (98% of them)."""
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", f"{prefix}.idx: not a Megatron index"
    code, n, nd = idx[17], *np.frombuffer(idx[18:34], dtype=np.int64)
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[code]
    sizes = np.frombuffer(idx, dtype=np.int32, count=n, offset=34)
    ptrs = np.frombuffer(idx, dtype=np.int64, count=n, offset=34 + 4 * n)
    toks = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    docs = [np.asarray(toks[p // np.dtype(dtype).itemsize:][:s], dtype=np.int64) for p, s in zip(ptrs, sizes)]
    return docs[: int(round(len(docs) * 0.98))]


class Batches:
    def __init__(s, docs, seed):
        s.docs, s.rng, s.queue = docs, np.random.default_rng(seed), []

    def next(s):
        while len(s.queue) < B:
            order = s.rng.permutation(len(s.docs))
            flat = np.concatenate([s.docs[i] for i in order])
            n = (len(flat) - 1) // T
            wins = [flat[i * T: i * T + T + 1] for i in range(n)]
            s.queue += [wins[i] for i in s.rng.permutation(n)]
        w = torch.from_numpy(np.stack(s.queue[:B])); s.queue = s.queue[B:]
        return w[:, :-1].to(dev), w[:, 1:].to(dev)


E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
FMAX = {E4: 448.0, E5: 57344.0}


class Meta:
    """One tensor role's scaling state (x, W or dy of one linear)."""
    def __init__(s, dtype): s.dtype, s.amax = dtype, None

    def cast(s, t):
        amax = t.detach().abs().amax().float()
        ref = amax if (a.fp8 == "current" or s.amax is None) else s.amax
        s.amax = torch.where(amax > 0, amax, s.amax if s.amax is not None else torch.ones_like(amax))
        scale = FMAX[s.dtype] / torch.clamp(ref, min=1e-30)
        q = (t.float() * scale).clamp(-FMAX[s.dtype], FMAX[s.dtype]).to(s.dtype)
        return q, scale.reciprocal()


class Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, lin):
        x2 = x.reshape(-1, x.shape[-1])
        xq, xs = lin.mx.cast(x2)
        wq, ws = lin.mw.cast(w)
        y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, bias=b.to(torch.bfloat16),
                             out_dtype=torch.bfloat16)
        ctx.save_for_backward(xq, xs, wq, ws)
        ctx.lin, ctx.shape, ctx.xdtype = lin, x.shape, x.dtype
        return y.view(*x.shape[:-1], -1)

    @staticmethod
    def backward(ctx, dy):
        xq, xs, wq, ws = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        gq, gs = ctx.lin.mg.cast(dy2)
        dx = torch._scaled_mm(gq, wq.t().contiguous().t(), scale_a=gs, scale_b=ws, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), scale_a=gs, scale_b=xs,
                              out_dtype=torch.float32)
        return dx.view(ctx.shape).to(ctx.xdtype), dw, dy2.float().sum(0), None


class Linear(nn.Linear):
    def __init__(s, i, o, fp8):
        super().__init__(i, o); s.fp8 = fp8
        s.mx, s.mw, s.mg = Meta(E4), Meta(E4), Meta(E5 if a.format == "hybrid" else E4)

    def forward(s, x):
        return Fp8Matmul.apply(x, s.weight, s.bias, s) if s.fp8 else super().forward(x)


class Block(nn.Module):
    def __init__(s, fp8):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.proj = Linear(C, 3 * C, fp8), Linear(C, C, fp8)
        s.fc, s.fcp = Linear(C, 4 * C, fp8), Linear(4 * C, C, fp8)

    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.proj(y)
        return x + s.fcp(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, fp8):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        s.h = nn.ModuleList(Block(fp8) for _ in range(L)); s.lnf = nn.LayerNorm(C)
        for n, prm in s.named_parameters():
            if prm.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("proj.weight", "fcp.weight")) else 0.02
                nn.init.normal_(prm, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(prm)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(T, device=idx.device))
        for b in s.h:
            x = b(x)
        logits = s.lnf(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.float()[..., :50257].reshape(-1, 50257), tgt.reshape(-1))


torch.manual_seed(a.seed)
m = GPT(a.fp8 != "none").to(dev)
decay = [q for q in m.parameters() if q.dim() == 2]
rest = [q for q in m.parameters() if q.dim() != 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                        lr=6e-4, betas=(0.9, 0.999), eps=1e-8, fused=True)


def lr_at(it):  # iteration it = 1..iters, Megatron's warm-up then cosine
    if it <= 100:
        return 6e-4 * it / 100
    r = (it - 100) / (a.iters - 100)
    return 6e-5 + 0.5 * (6e-4 - 6e-5) * (1 + math.cos(math.pi * r))


data = Batches(load_tokens(a.data), a.data_seed)
out = open(a.out, "w")
acc, t0 = 0.0, time.time()
for it in range(1, a.iters + 1):
    x, y = data.next()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x, y)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    for g in opt.param_groups:
        g["lr"] = lr_at(it)
    opt.step(); opt.zero_grad(set_to_none=True)
    acc += loss.item()
    if it % a.log_interval == 0:
        ms = (time.time() - t0) * 1000 / a.log_interval
        rec = {"iteration": it, "lm_loss": acc / a.log_interval, "grad_norm": gn.item(), "elapsed_ms": ms}
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(f"iteration {it} lm loss {rec['lm_loss']:.6f} grad norm {rec['grad_norm']:.3f} {ms:.1f} ms", flush=True)
        acc, t0 = 0.0, time.time()
