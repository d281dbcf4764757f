#!/usr/bin/env python3
"""cuBLAS's fp32 GEMM (TF32 off) for ``M N K`` shapes, as nn.Linear runs it (``addmm(bias, x, weight.t())``): timed
with CUDA events, and each shape's kernel name from the profiler. Run under ncu with
``--launch-skip`` so one launch of each shape is profiled after warm-up::

    python3 torch_gemm.py --shapes 6304x576x192 6304x768x192 [--sdpa 32x3x197x64] [--iters 50] [--out gemm.json]

``--sdpa BxHxSxD`` also times ``scaled_dot_product_attention`` (the kernel timm's attention runs).
"""

import argparse
import json

import torch


def _timed(name, flops, call, iters):
    """``call`` after five warm-up runs: the mean over ``iters`` back to back, and its kernels."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    end.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(end) * 1e3 / iters
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"{name}: {us:.1f} us, {flops / us / 1e6:.2f} TFLOP/s, {kernels}", flush=True)
    return {"shape": name, "us": us, "tflops": flops / us / 1e6, "kernels": kernels}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=[], help="MxNxK")
    ap.add_argument("--sdpa", nargs="*", default=[], help="BxHxSxD")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for text in args.shapes:
        m, n, k = (int(v) for v in text.split("x"))
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda").t()  # nn.Linear's weight, [N, K], transposed as it runs
        bias = torch.randn(n, device="cuda")
        rows.append(_timed(text, 2 * m * n * k, lambda: torch.addmm(bias, x, w), args.iters))
    for text in args.sdpa:
        b, h, s, d = (int(v) for v in text.split("x"))
        q, k, v = (torch.randn(b, h, s, d, device="cuda") for _ in range(3))
        attention = torch.nn.functional.scaled_dot_product_attention
        rows.append(_timed(f"sdpa {text}", 4 * b * h * s * s * d, lambda: attention(q, k, v), args.iters))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
