#!/usr/bin/env python3
"""Causal attention: tripod's CUDA backend next to PyTorch SDPA (bf16).

For each shape (B*T = 8192): writes random q/k/v (the fused (B, T, 3, NH, HS)
layout) and dout, runs `kernels_bench --attn-io` (one tripod forward +
backward, whichever attention path TRIPOD_CUDA_ATTENTION selects), and reports
the max abs error of out, lse, dq, dk, dv against an f32 reference computed
from the same bf16 inputs, next to the errors of torch's cuDNN and flash
SDPA backends. Then times torch SDPA forward and backward with both backends
(TFLOP/s with causal-half FLOPs: forward 4*B*NH*T*T*HS/2, backward 2.5x);
time tripod itself with `kernels_bench --only attention_shapes`.

  python3 scripts/attention_torch_bench.py --bin path/to/kernels_bench [--out results.txt]
"""
import argparse
import os
import subprocess
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(8, 1024, 12, 64), (8, 1024, 25, 64), (4, 2048, 16, 128)]  # B, T, NH, HS


def reference(qkv, dout):
    """f32 causal attention, its log-sum-exp and gradients (B, T, 3, H, D)."""
    x = qkv.float().detach().requires_grad_(True)
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    scale = q.shape[-1] ** -0.5
    s = (q @ k.transpose(-1, -2)) * scale
    T = s.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool, device=s.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H, T)
    o = torch.softmax(s, dim=-1) @ v  # (B, H, T, D)
    o.backward(dout.float().transpose(1, 2))
    return o.transpose(1, 2).detach(), lse.detach(), x.grad.detach()


def torch_sdpa(qkv, dout, backend):
    x = qkv.detach().clone().requires_grad_(True)
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(dout.transpose(1, 2))
    return o.transpose(1, 2).detach(), x.grad.detach()


def errs(out, dqkv, ref_o, ref_dqkv, B, T, H, D, lse=None, ref_lse=None):
    out = out.float().view(B, T, H, D)
    g = dqkv.float().view(B, T, 3, H, D)
    e = {"out": (out - ref_o).abs().max().item()}
    if lse is not None:
        e["lse"] = (lse.float().view(B, H, T) - ref_lse).abs().max().item()
    for i, n in enumerate(("dq", "dk", "dv")):
        e[n] = (g[:, :, i] - ref_dqkv[:, :, i]).abs().max().item()
    return e


def time_ms(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / iters)
    return sorted(ts)[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="kernels_bench binary")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = []

    def say(s):
        print(s, flush=True)
        lines.append(s)

    say(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}, "
        f"TRIPOD_CUDA_ATTENTION={os.environ.get('TRIPOD_CUDA_ATTENTION', 'auto')}")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    for B, T, H, D in SHAPES:
        tag = f"B={B} T={T} NH={H} HS={D}"
        qkv = torch.randn(B, T, 3, H, D, device="cuda", generator=gen).bfloat16()
        dout = torch.randn(B, T, H, D, device="cuda", generator=gen).bfloat16()
        ref_o, ref_lse, ref_d = reference(qkv, dout)
        with tempfile.TemporaryDirectory() as d:
            qkv.view(torch.int16).cpu().numpy().tofile(os.path.join(d, "qkv.bin"))
            dout.view(torch.int16).cpu().numpy().tofile(os.path.join(d, "dout.bin"))
            r = subprocess.run([args.bin, "--attn-io", d, str(B), str(T), str(H), str(D)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                say(f"{tag}: kernels_bench --attn-io failed rc={r.returncode}: {r.stderr.strip()[-400:]}")
                continue
            for l in (r.stdout + r.stderr).splitlines():
                if "attention" in l:
                    say(f"  tripod log: {l.strip()}")

            def load(name, dtype, n):
                import numpy as np
                a = np.fromfile(os.path.join(d, name), dtype=np.int16 if dtype == torch.bfloat16 else np.float32)
                t = torch.from_numpy(a[:n].copy()).cuda()
                return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t

            o = load("out.bin", torch.bfloat16, B * T * H * D)
            lse = load("lse.bin", torch.float32, B * H * T)
            dqkv = load("dqkv.bin", torch.bfloat16, B * T * 3 * H * D)
        e = errs(o, dqkv, ref_o, ref_d, B, T, H, D, lse, ref_lse)
        say(f"{tag} max|err| vs f32 reference: tripod " + " ".join(f"{k}={v:.2e}" for k, v in e.items()))
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                to, td = torch_sdpa(qkv, dout, be)
                e = errs(to, td, ref_o, ref_d, B, T, H, D)
                say(f"{tag} max|err| vs f32 reference: torch-{name} " + " ".join(f"{k}={v:.2e}" for k, v in e.items()))
            except RuntimeError as ex:
                say(f"{tag} torch-{name}: unavailable ({str(ex).splitlines()[0][:120]})")
        del ref_o, ref_lse, ref_d
        torch.cuda.empty_cache()

    say("torch SDPA timings (bf16, causal; TFLOP/s with causal-half FLOPs, backward 2.5x):")
    for B, T, H, D in SHAPES:
        f = 4.0 * B * H * T * T * D / 2
        x = torch.randn(B, T, 3, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
        q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    bwd = time_ms(lambda: torch.autograd.grad(o, x, dout, retain_graph=True))
                say(f"  torch-{name:5s} B={B} T={T} NH={H} HS={D}: fwd {fwd * 1e3:8.1f} us {f / fwd * 1e-9:6.1f} TFLOP/s"
                    f" | bwd {bwd * 1e3:8.1f} us {2.5 * f / bwd * 1e-9:6.1f} TFLOP/s")
            except RuntimeError as ex:
                say(f"  torch-{name} B={B} T={T}: unavailable ({str(ex).splitlines()[0][:120]})")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
