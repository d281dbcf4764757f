"""The rules read the profile: budgets follow the hardware, and decisions differ where they should."""

import pytest

import tvm_fusion_hw as hw
from tvm_fusion_hw.occupancy import register_budget
from tvm_fusion_hw.policy import FusionPolicy, PolicyConfig


BOTH_PAIRS = ("conv->window", "depthwise_conv->pointwise_conv")


def report_for(runner, model, profile, **knobs):
    """The decisions on ``profile``; complex pairs count as templated unless a knob says not."""
    import tvm
    from tvm_fusion_hw.pipeline import fused_module

    knobs.setdefault("pair_templates", BOTH_PAIRS)
    fuse = hw.HardwareAwareFuseOps(profile, **knobs)
    mod, _, _ = runner.module(model)
    fused_module(mod, tvm.target.Target({"kind": "llvm"}), fuse)
    return fuse.report


def complex_pairs(report):
    return report.find("complex-pair")


def test_conv_pool_fused_on_h200_and_not_on_gddr6(runner):
    """With 228 KiB of shared memory per SM the conv tile keeps occupancy; with the RTX 3060's
    100 KiB only two blocks fit and occupancy falls by more than the 20% the rules allow."""
    (h200,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-h200"))
    assert h200.fused, h200.reason
    assert h200.figures["occupancy_drop"] <= 0.20
    assert h200.figures["fused_shared_bytes"] <= h200.figures["shared_bytes_per_block_limit"]
    (rtx,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-rtx-3060"))
    assert not rtx.fused
    assert "occupancy" in rtx.reason and "drops" in rtx.reason
    assert rtx.figures["occupancy_drop"] > 0.20
    assert rtx.figures["intermediate_tile_bytes"] == h200.figures["intermediate_tile_bytes"]


def test_amd_tile_exceeds_64_kib_of_lds(runner):
    """The tile covers two warps of pixels: 128 on a wave64 GPU, 64 on NVIDIA: twice the bytes,
    more than the MI300X's 64 KiB of LDS per workgroup."""
    (h200,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-h200"))
    (mi300,) = complex_pairs(report_for(runner, "conv_relu_pool", "amd-mi300x"))
    assert mi300.figures["intermediate_tile_bytes"] == 2 * h200.figures["intermediate_tile_bytes"]
    assert not mi300.fused and "exceeds 64 KiB" in mi300.reason


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-rtx-3060", "amd-mi300x"])
def test_memory_bound_chain_is_one_group(runner, profile):
    report = report_for(runner, "eltwise5", profile)
    assert len(report.groups) == 1
    assert report.groups[0].regime == "memory-bound"
    assert all(d.fused for d in report.decisions)
    assert all("memory-bound chain" in d.reason for d in report.find("chain"))


def test_register_budget_and_depth_cap_follow_the_profile():
    h200, orin, mi300 = (hw.load_profile(n) for n in ("nvidia-h200", "nvidia-jetson-agx-orin", "amd-mi300x"))
    # 64K registers shared by 1024 threads (half of 2048), by 768 (half of 1536, rounded to 8),
    # and 512 KiB of VGPRs shared by 1024 lanes of wave64.
    assert register_budget(h200, 0.5) == 64
    assert register_budget(orin, 0.5) == 80
    assert register_budget(mi300, 0.5) == 128
    caps = {p.name: FusionPolicy(p).depth_cap for p in (h200, orin, mi300)}
    assert caps == {"nvidia-h200": 12, "nvidia-jetson-agx-orin": 16, "amd-mi300x": 28}
    assert FusionPolicy(h200, PolicyConfig(max_depth=5)).depth_cap == 5


def test_depth_cap_binds_on_a_long_chain(runner):
    """A tight occupancy target leaves too few registers for the whole 5-op chain."""
    fuse = hw.HardwareAwareFuseOps("nvidia-h200", target_occupancy=1.0)
    import tvm
    from tvm_fusion_hw.pipeline import fused_module

    mod, _, _ = runner.module("eltwise5")
    fused_module(mod, tvm.target.Target({"kind": "llvm"}), fuse)
    refused = fuse.report.refused()
    assert refused and all(d.rule == "depth" for d in refused)
    assert len(fuse.report.groups) > 1


def test_regime_is_relative_to_the_ridge_point():
    """20 FLOP/B is compute-bound on the H200 (ridge 14) and memory-bound on the RTX 3060 (35)."""
    from tvm_fusion_hw.analysis import GroupCost

    cost = GroupCost(flops=20e6, compulsory_bytes=1_000_000, saved_bytes=0, live_values=1, members=1)
    assert cost.regime(hw.load_profile("nvidia-h200")) == "compute-bound"
    assert cost.regime(hw.load_profile("nvidia-rtx-3060")) == "memory-bound"
    # The roofline time bound follows the same split: compute time on one, memory time on the other.
    assert cost.roofline_seconds(hw.load_profile("nvidia-h200")) == pytest.approx(20e6 / 67e12)
    assert cost.roofline_seconds(hw.load_profile("nvidia-rtx-3060")) == pytest.approx(1e6 / 360e9)


@pytest.mark.parametrize("knob, value", [("target_occupancy", 0), ("max_occupancy_drop", 1.5), ("max_depth", 0)])
def test_bad_knobs_are_one_line_errors(knob, value):
    with pytest.raises(hw.FusionHWError, match=knob):
        hw.HardwareAwareFuseOps("nvidia-h200", **{knob: value})


def test_unknown_knob_lists_known_ones():
    with pytest.raises(hw.FusionHWError, match="target_occupancy"):
        hw.HardwareAwareFuseOps("nvidia-h200", occupancy=0.3)
