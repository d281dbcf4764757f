"""cuBLAS (torch.matmul, fp32, TF32 off) on the transformers' GEMM shapes at batch 32: the per-shape
reference for the ImplicitGemm sweep beside it. Prints a markdown table; run on the GPU box:
    python3 torch_gemm.py > torch_gemm.md"""
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
SHAPES = {  # name: (batch S, M, N, K)
    "deit_tiny qkv": (1, 6304, 576, 192), "deit_tiny proj": (1, 6304, 192, 192),
    "deit_tiny fc1": (1, 6304, 768, 192), "deit_tiny fc2": (1, 6304, 192, 768),
    "deit_tiny q.kT": (96, 197, 197, 64), "deit_tiny p.v": (96, 197, 64, 197),
    "gpt2 qkv": (1, 4096, 2304, 768), "gpt2 proj": (1, 4096, 768, 768),
    "gpt2 fc1": (1, 4096, 3072, 768), "gpt2 fc2": (1, 4096, 768, 3072),
}
print("| GEMM | S x M x N x K | torch.matmul us | TFLOP/s |")
print("| --- | --- | ---: | ---: |")
for name, (s, m, n, k) in SHAPES.items():
    a = torch.randn(s, m, k, device="cuda")
    b = torch.randn(s, k, n, device="cuda")
    for _ in range(10):
        torch.matmul(a, b)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 10)
    us = sorted(times)[len(times) // 2]
    print(f"| {name} | {s} x {m} x {n} x {k} | {us:.1f} | {2 * s * m * n * k / us / 1e6:.1f} |")
