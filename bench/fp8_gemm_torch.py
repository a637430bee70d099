#!/usr/bin/env python3
# FP8 GEMM peer in PyTorch for bench/kernels/fp8_gemm_bench: torch._scaled_mm
# (per-tensor scaled FP8, cuBLASLt underneath) against torch.matmul in bf16,
# at the same model shapes and orientations (y = x W^T, dx = dy W,
# dW = dy^T x), with the same operand formats: x and W E4M3, dy E5M2; fwd
# and dgrad write bf16, wgrad f32. _scaled_mm wants its first operand
# row-major and its second column-major: the K-major layout of tripod's
# fp8_matmul, so the same transposed copies are fed. use_fast_accum=False,
# as fp8_matmul; the "fast" column with use_fast_accum=True (the bench's
# fast-accumulation column). (tripod's wgrad also adds into the f32 gradient, one read
# of it more than _scaled_mm's plain write; the bf16 wgrad here writes bf16.) Timing: 3 warm-up calls, then 5
# repeats of ITERS calls between CUDA-event pairs; the median per call.
#
# usage: fp8_gemm_torch.py [--model gpt2-1.5b|llama3-8b|all] [--iters N]
import argparse

import torch

MODELS = {
    "gpt2-1.5b": (16 * 1024, [("qkv", 1600, 4800), ("proj", 1600, 1600), ("fc1", 1600, 6400), ("fc2", 6400, 1600)]),
    "llama3-8b": (8192, [("qkv", 4096, 6144), ("proj", 4096, 4096), ("fc1", 4096, 28672), ("fc2", 14336, 4096)]),
}


def median_us(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iters)
    return sorted(times)[2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="all", choices=["all", *MODELS])
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    dev = torch.device("cuda")
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    one = torch.ones((), device=dev)  # per-tensor scales (f32 scalars)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.iters} iterations per repeat")
    print(f"{'model':10} {'gemm':5} {'orient':6} {'M x N x K':22} {'bf16 us':>10} {'TFLOP/s':>9} "
          f"{'fp8 us':>10} {'TFLOP/s':>9} {'ratio':>7} {'fast us':>10} {'TFLOP/s':>9}")
    for name, (N, gemms) in MODELS.items():
        if args.model not in ("all", name):
            continue
        for g, C, OC in gemms:
            x = torch.randn(N, C, device=dev, dtype=torch.bfloat16)
            w = torch.randn(OC, C, device=dev, dtype=torch.bfloat16) * 0.02
            dy = torch.randn(N, OC, device=dev, dtype=torch.bfloat16) * 1e-3
            x8, w8, dy8 = x.to(e4), w.to(e4), (dy * 16).to(e5)
            x8t, w8t, dy8t = x8.t().contiguous(), w8.t().contiguous(), dy8.t().contiguous()
            def scaled(a, b, out_dtype):  # a row-major (M, K), b row-major (Nn, K): a @ b^T
                return (lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=out_dtype),
                        lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=out_dtype,
                                                 use_fast_accum=True))

            cases = [
                ("fwd", N, OC, C, lambda: x @ w.t(), *scaled(x8, w8, torch.bfloat16)),
                ("dgrad", N, C, OC, lambda: dy @ w, *scaled(dy8, w8t, torch.bfloat16)),
                ("wgrad", OC, C, N, lambda: dy.t() @ x, *scaled(dy8t, x8t, torch.float32)),
            ]
            for orient, M, Nn, K, bf16, fp8, fp8_fast in cases:
                flops = 2.0 * M * Nn * K
                tb, tf, tq = (median_us(fn, args.iters) for fn in (bf16, fp8, fp8_fast))
                shape = f"{M} x {Nn} x {K}"
                print(f"{name:10} {g:5} {orient:6} {shape:22} {tb:10.1f} {flops / tb * 1e-6:9.1f} "
                      f"{tf:10.1f} {flops / tf * 1e-6:9.1f} {tb / tf:6.2f}x {tq:10.1f} {flops / tq * 1e-6:9.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
