"""bench/torch_compare.py: our kernels joined to PyTorch's GEMM ops by FLOPs, on rows written here."""

from script_loader import BENCH, load_script

torch_compare = load_script(BENCH / "torch_compare.py", "torch_compare")


def test_op_flops_from_input_shapes():
    # 2 x 6304 x 192 x 576; a bmm's batch multiplies; an op that is no GEMM has none
    assert torch_compare.op_flops("aten::addmm [[576], [6304, 192], [192, 576], [], []]") == 2 * 6304 * 192 * 576
    assert torch_compare.op_flops("aten::bmm [[96, 197, 64], [96, 64, 197]]") == 2 * 96 * 197 * 64 * 197
    assert torch_compare.op_flops("aten::softmax [[96, 197, 197], [], []]") is None
    assert torch_compare.op_flops("aten::addmm []") is None


def test_kernels_match_the_op_of_their_flops_and_calls():
    ours = [{"name": "fused_matmul_add2", "us": 740.0, "calls": 12},        # qkv, epilogue FLOPs on top
            {"name": "fused_matmul6_add7", "us": 4.9, "calls": 1},
            {"name": "softmax", "us": 92.4, "calls": 12}]
    flops = {"fused_matmul_add2": 12 * (2 * 6304 * 192 * 576 + 6304 * 576),
             "fused_matmul6_add7": 2 * 32 * 192 * 1000 * 1.5,  # 50% off: no match
             "softmax": 12 * 5 * 96 * 197 * 197}
    theirs = [{"name": "aten::addmm [[576], [6304, 192], [192, 576], [], []]", "us": 487.2, "calls": 12},
              {"name": "aten::addmm [[1000], [32, 192], [192, 1000], [], []]", "us": 8.9, "calls": 1},
              {"name": "aten::gelu [[32, 197, 768], []]", "us": 125.5, "calls": 12}]
    matched, alone, left = torch_compare.compare(ours, flops, theirs)
    assert [(m["kernel"], m["calls"], round(m["ours_us"], 2), round(m["torch_us"], 2)) for m in matched] == [
        ("fused_matmul_add2", 12, 61.67, 40.6)]
    assert [k["name"] for k in alone] == ["softmax", "fused_matmul6_add7"]
    assert [op["name"] for op in left] == ["aten::addmm [[1000], [32, 192], [192, 1000], [], []]"]
    text = torch_compare.markdown("t", matched, alone, left)
    assert "| 12 | 61.7 | 40.6 | 1.52x |" in text
