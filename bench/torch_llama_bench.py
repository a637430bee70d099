#!/usr/bin/env python3
# Llama-style training-speed peer in plain PyTorch, for the same shape as a
# `tripod train` Llama run: RMSNorm, RoPE (rotate-half), grouped-query
# attention through SDPA (enable_gqa where this PyTorch has it, else K/V
# repeat_interleave), SwiGLU MLP, untied output layer, no biases; bf16
# autocast, fused AdamW, torch.compile, random tokens. Prints the mean
# tokens/s of steps 11..STEPS, the MFU (FLOPs counted as tripod counts them:
# 6 x parameters without the input embedding + 6 L T C per token, against
# an H200's 989 TFLOP/s bf16 dense peak) and the peak memory.
#
# usage: torch_llama_bench.py LAYERS HIDDEN HEADS GROUPS FFN MICRO_BATCH SEQ VOCAB STEPS
#   e.g. torch_llama_bench.py 16 2048 32 8 5632 4 2048 32000 40   (Llama ~1B, bench/RESULTS.md)
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, H, G, FFN, B, T, V, STEPS = (int(a) for a in sys.argv[1:10])
HS, KH = C // H, H // G
PEAK_TFLOPS = 989.0
torch.backends.cuda.matmul.allow_tf32 = True
HAS_GQA = True  # SDPA's enable_gqa (PyTorch 2.5+); else K/V are repeated per query head
try:
    F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8),
                                   enable_gqa=True)
except TypeError:
    HAS_GQA = False


def rope_tables():
    inv = 10000.0 ** (-torch.arange(0, HS, 2, dtype=torch.float32) / HS)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([ang.cos()] * 2, -1).cuda(), torch.cat([ang.sin()] * 2, -1).cuda()


COS, SIN = rope_tables()


def rope(x):  # (B, heads, T, HS)
    x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
    return x * COS + torch.cat([-x2, x1], -1) * SIN


class RMSNorm(nn.Module):
    def __init__(s):
        super().__init__()
        s.w = nn.Parameter(torch.ones(C))

    def forward(s, x):
        return F.rms_norm(x, (C,), s.w, 1e-5) if hasattr(F, "rms_norm") else \
            x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * s.w


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1, s.n2 = RMSNorm(), RMSNorm()
        s.qkv = nn.Linear(C, (H + 2 * G) * HS, bias=False)
        s.proj = nn.Linear(C, C, bias=False)
        s.fc1 = nn.Linear(C, 2 * FFN, bias=False)  # [gate | up]
        s.fc2 = nn.Linear(FFN, C, bias=False)

    def forward(s, x):
        q, k, v = s.qkv(s.n1(x)).split([H * HS, G * HS, G * HS], dim=-1)
        q = rope(q.view(B, T, H, HS).transpose(1, 2))
        k = rope(k.view(B, T, G, HS).transpose(1, 2))
        v = v.view(B, T, G, HS).transpose(1, 2)
        if HAS_GQA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(KH, 1), v.repeat_interleave(KH, 1),
                                               is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        gate, up = s.fc1(s.n2(x)).chunk(2, dim=-1)
        return x + s.fc2(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, C)
        s.h = nn.ModuleList(Block() for _ in range(L))
        s.nf = RMSNorm()
        s.out = nn.Linear(C, V, bias=False)

    def forward(s, idx, tgt):
        x = s.emb(idx)
        for b in s.h:
            x = b(x)
        logits = s.out(s.nf(x))
        return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))


m = Llama().cuda()
n = sum(p.numel() for p in m.parameters())
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
tok = B * T / (sum(times[10:]) / len(times[10:]))
flops = 6 * (n - V * C) + 6 * L * T * C  # tripod's count: no matmul in the input embedding
print(f"torch llama L{L} C{C} H{H} G{G} F{FFN} B{B} T{T} V{V} (sdpa gqa {'native' if HAS_GQA else 'repeat'}): "
      f"params {n/1e6:.1f}M  {tok:,.0f} tok/s  MFU {tok*flops/(PEAK_TFLOPS*1e12)*100:.1f}%  "
      f"peak {torch.cuda.max_memory_allocated()/2**30:.1f} GiB")
