"""bench/kernel_roofline.py: measured kernels against their roofline bounds."""

import json

from script_loader import BENCH, load_script

kernel_roofline = load_script(BENCH / "kernel_roofline.py", "kernel_roofline")

# the H200 profile: 4.8 TB/s, 67 TFLOP/s (FP32)
REPORT = {"groups": [
    {"kernel": "fused_dw", "flops": 1e6, "compulsory_bytes": 9.6e6},   # 2.0 us of bytes, 0.015 us of FLOPs
    {"kernel": "fused_dw", "flops": 1e6, "compulsory_bytes": 9.6e6},   # a second call of the same kernel
    {"kernel": "fused_gemm", "flops": 670e6, "compulsory_bytes": 4.8e6},  # 10.0 us of FLOPs, 1.0 us of bytes
]}
KERNELS = [
    {"name": "fused_gemm", "calls": 1, "us_per_call": 20.0, "us": 20.0},
    {"name": "fused_dw", "calls": 2, "us_per_call": 8.0, "us": 16.0},
    {"name": "transpose_weights", "calls": 1, "us_per_call": 4.0, "us": 4.0},
]


def test_each_kernel_gets_its_bound_and_efficiency(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"profile": "nvidia-h200", "entries": [
        {"model": "m", "batch": 32, "report": "m_report.json", "variants": [{"name": "hw"}]}]}))
    (tmp_path / "m_report.json").write_text(json.dumps(REPORT))
    results = {"system": {"gpu": "H200"}, "rows": [
        {"model": "m", "batch": 32, "kernels": {"hw": {"all": KERNELS}}}]}
    text = kernel_roofline.report(results, tmp_path)
    assert "| `fused_gemm` | 1 | 20.00 | 10.00 | compute | 50% | 20.0 |" in text
    assert "| `fused_dw` | 2 | 8.00 | 2.00 | memory | 25% | 16.0 |" in text
    assert "| `transpose_weights` | 1 | 4.00 | - | - | - | 4.0 |" in text
    # bounds 10 + 2 x 2 = 14 us against 36 us measured
    assert "Kernels with a bound: 2 of 3, 36.0 us measured against 14.0 us of bounds (39%); the rest 4.0 us." in text


def test_a_row_without_a_kernel_profile_is_left_out(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"profile": "nvidia-h200", "entries": [
        {"model": "m", "batch": 1, "report": None, "variants": [{"name": "hw"}]}]}))
    text = kernel_roofline.report({"rows": [{"model": "m", "batch": 1}]}, tmp_path)
    assert "## m" not in text
