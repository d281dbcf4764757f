"""cuBLAS (torch.matmul, fp32, TF32 off) on the GEMM shapes of ViT-B/16, Mixer-B/16 and GPT-2 (2
layers, sequence 128) at batch 1: the reference for the plugin's kernels beside it. Prints a
markdown table; run on the GPU box: python3 torch_gemm_b1.py > torch_gemm_b1.md"""
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
SHAPES = {  # name: (batch S, M, N, K)
    "vit qkv": (1, 197, 2304, 768), "vit proj": (1, 197, 768, 768),
    "vit fc1": (1, 197, 3072, 768), "vit fc2": (1, 197, 768, 3072),
    "vit q.kT": (12, 197, 197, 64), "vit p.v": (12, 197, 64, 197),
    "mixer token fc1": (1, 768, 384, 196), "mixer token fc2": (1, 768, 196, 384),
    "mixer channel fc1": (1, 196, 3072, 768), "mixer channel fc2": (1, 196, 768, 3072),
    "gpt2 qkv": (1, 128, 2304, 768), "gpt2 proj": (1, 128, 768, 768),
    "gpt2 fc1": (1, 128, 3072, 768), "gpt2 fc2": (1, 128, 768, 3072),
    "gpt2 q.kT": (12, 128, 128, 64), "gpt2 p.v": (12, 128, 64, 128),
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
