#!/usr/bin/env python3
# Mixtral-style training-speed peer in plain PyTorch, for the same shape as a
# `tripod train --num-experts` run: RMSNorm, RoPE (rotate-half), grouped-query
# attention through SDPA, and in every layer an MoE MLP: an fp32 router,
# the top-k logits then softmax over them (Mixtral), the Switch load-balancing
# loss (coefficient 1e-2), dropless dispatch (a stable sort of the slots by
# expert), the SwiGLU experts as grouped GEMMs (torch._grouped_mm over the
# experts' contiguous rows where this PyTorch has it, else a loop over the
# experts), the rows combined per token with their probabilities; untied
# output layer, no biases; bf16 autocast, fused AdamW, torch.compile, random
# tokens. Prints the mean tokens/s of steps 11..STEPS, the MFU on active
# parameters (FLOPs counted as tripod counts them: 6 x the parameters a token
# goes through, k of the E experts, without the input embedding, + 6 L T C per
# token, against an H200's 989 TFLOP/s bf16 dense peak) and the peak memory.
#
# usage: torch_moe_bench.py LAYERS HIDDEN HEADS GROUPS EXPERTS TOPK EXPERT_FFN MICRO_BATCH SEQ VOCAB STEPS
#   e.g. torch_moe_bench.py 16 2048 32 8 8 2 5632 2 2048 32000 30   (Mixtral-shaped, bench/RESULTS.md)
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, H, G, E, K, FE, B, T, V, STEPS = (int(a) for a in sys.argv[1:12])
HS = C // H
N = B * T
PEAK_TFLOPS = 989.0
AUX_COEFF = 1e-2
torch.backends.cuda.matmul.allow_tf32 = True


def has_grouped_mm():
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:  # sm90+ and bf16 only; shapes multiples of 16
        a = torch.zeros(32, 16, device="cuda", dtype=torch.bfloat16)
        b = torch.zeros(2, 32, 16, device="cuda", dtype=torch.bfloat16)  # (E, out, in), passed transposed
        torch._grouped_mm(a, b.transpose(-2, -1), offs=torch.tensor([16, 32], device="cuda", dtype=torch.int32))
        return True
    except Exception:
        return False


GROUPED = has_grouped_mm()


def rope_tables():
    inv = 10000.0 ** (-torch.arange(0, HS, 2, dtype=torch.float32) / HS)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([ang.cos()] * 2, -1).cuda(), torch.cat([ang.sin()] * 2, -1).cuda()


COS, SIN = rope_tables()


def rope(x):  # (B, heads, T, HS)
    x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
    return x * COS + torch.cat([-x2, x1], -1) * SIN


class MoE(nn.Module):
    def __init__(s):
        super().__init__()
        s.router = nn.Parameter(torch.randn(E, C) * 0.02)
        s.w1 = nn.Parameter(torch.randn(E, 2 * FE, C) * 0.02)  # [gate | up], (out, in) per expert
        s.w2 = nn.Parameter(torch.randn(E, C, FE) * 0.02)

    def experts(s, xs, counts):
        w1, w2 = s.w1.to(xs.dtype).transpose(-2, -1), s.w2.to(xs.dtype).transpose(-2, -1)  # (E, in, out)
        if GROUPED:
            offs = torch.cumsum(counts, 0).to(torch.int32)
            h = torch._grouped_mm(xs, w1, offs=offs)
            gate, up = h.chunk(2, dim=-1)
            return torch._grouped_mm((F.silu(gate) * up).contiguous(), w2, offs=offs)
        out, at = [], 0
        for e, c in enumerate(counts.tolist()):  # the loop peer: a host sync for the counts
            gate, up = (xs[at:at + c] @ w1[e]).chunk(2, dim=-1)
            out.append((F.silu(gate) * up) @ w2[e])
            at += c
        return torch.cat(out)

    def forward(s, x):  # x (N, C)
        with torch.autocast("cuda", enabled=False):  # the router in fp32, as tripod's
            logits = x.float() @ s.router.float().t()
            top, idx = logits.topk(K, dim=-1)
            probs = top.softmax(-1)
            scores = logits.softmax(-1)  # Switch aux loss: E / (k N^2) sum_e count_e sum_n s_ne
            counts = F.one_hot(idx, E).sum((0, 1))
            aux = AUX_COEFF * E / (K * N * N) * (counts.float() * scores.sum(0)).sum()
        order = idx.flatten().argsort(stable=True)  # slots sorted by expert, slot order within
        tok = order // K
        xb = x.to(torch.bfloat16)
        ys = s.experts(xb[tok], counts)
        y = torch.zeros_like(xb).index_add_(0, tok, ys * probs.flatten()[order, None].to(ys.dtype))
        return y, aux


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1, s.n2 = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        s.qkv = nn.Linear(C, (H + 2 * G) * HS, bias=False)
        s.proj = nn.Linear(C, C, bias=False)
        s.moe = MoE()

    def forward(s, x):
        q, k, v = s.qkv(s.n1(x)).split([H * HS, G * HS, G * HS], dim=-1)
        q = rope(q.view(B, T, H, HS).transpose(1, 2))
        k = rope(k.view(B, T, G, HS).transpose(1, 2))
        v = v.view(B, T, G, HS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        m, aux = s.moe(s.n2(x).view(N, C))
        return x + m.view(B, T, C), aux


class Mixtral(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, C)
        s.h = nn.ModuleList(Block() for _ in range(L))
        s.nf = nn.RMSNorm(C, eps=1e-5)
        s.out = nn.Linear(C, V, bias=False)

    def forward(s, idx, tgt):
        x, aux = s.emb(idx), 0.0
        for b in s.h:
            x, a = b(x)
            aux = aux + a
        logits = s.out(s.nf(x))
        return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1)) + aux


m = Mixtral().cuda()
n = sum(p.numel() for p in m.parameters())
active = n - V * C - L * (E - K) * 3 * C * FE  # without the input embedding; k of the E experts
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
cm = torch.compile(m)
x = torch.randint(0, V, (B, T), device="cuda")
y = torch.randint(0, V, (B, T), device="cuda")
times = []
for i in range(STEPS):
    torch.cuda.synchronize()
    t0 = time.time()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = cm(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    times.append(time.time() - t0)
tok = N / (sum(times[10:]) / len(times[10:]))
flops = 6 * active + 6 * L * T * C
print(f"torch moe L{L} C{C} H{H} G{G} E{E} k{K} Fe{FE} B{B} T{T} V{V} "
      f"(experts {'torch._grouped_mm' if GROUPED else 'loop'}): params {n/1e9:.2f}B active {active/1e9:.2f}B  "
      f"{tok:,.0f} tok/s  MFU {tok*flops/(PEAK_TFLOPS*1e12)*100:.1f}%  "
      f"peak {torch.cuda.max_memory_allocated()/2**30:.1f} GiB")
