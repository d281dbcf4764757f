"""bench/torch_kernels.py: the markdown of PyTorch's per-op and per-kernel profile, on a result
written here (no GPU, no torch)."""

from script_loader import BENCH, load_script

torch_kernels = load_script(BENCH / "torch_kernels.py", "torch_kernels")


def _result():
    return {"model": "deit_tiny", "batch": 32, "mode": "eager", "gpu": "H100", "total_us": 120.0,
            "ops": [{"name": "aten::addmm [[768], [6304, 192], [192, 768]]", "us": 90.0, "calls": 3},
                    {"name": "aten::softmax [[96, 197, 197]]", "us": 30.0, "calls": 1}],
            "kernels": [{"name": "sm90_xmma_gemm_f32f32", "us": 90.0, "calls": 3},
                        {"name": "softmax_warp_forward", "us": 30.0, "calls": 0}]}


def test_markdown_rows_per_iteration_and_per_call():
    text = torch_kernels.markdown([_result()])
    assert "## deit_tiny b32, eager (H100): 120.0 us of kernels" in text
    # 90 us over 3 calls an iteration
    assert "| `aten::addmm [[768], [6304, 192], [192, 768]]` | 90.0 | 3 | 30.0 |" in text
    # a kernel the profile saw no call of (rounded away) divides by nothing
    assert "| `softmax_warp_forward` | 30.0 | 0 | 0.0 |" in text


def test_markdown_keeps_the_top_rows():
    text = torch_kernels.markdown([_result()], top=1)
    assert "aten::addmm" in text and "aten::softmax" not in text
    assert "sm90_xmma_gemm_f32f32" in text and "softmax_warp_forward" not in text
