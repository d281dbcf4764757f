"""The rules read the profile: budgets follow the hardware, and decisions differ where they should."""

from types import SimpleNamespace

import pytest

import tvm_fusion_hw as hw
from tvm_fusion_hw.hardware.occupancy import occupancy, register_budget
from tvm_fusion_hw.fusion.policy import FusionPolicy, PolicyConfig
from tvm_fusion_hw.plans import KernelPlan, TemplatePlanners
from tvm_fusion_hw.schedules import template_planners


BOTH_PAIRS = ("conv->window", "depthwise_conv->pointwise_conv")


def planners_with(pairs=None, kernel_plan=None):
    """The schedule templates' planners with some pair entries (or the part planner) replaced."""
    base = template_planners()
    return TemplatePlanners(pairs={**base.pairs, **(pairs or {})}, fused_by_default=base.fused_by_default,
                            kernel_plan=kernel_plan or base.kernel_plan)


def report_for(runner, model, profile, batch=1, planners=None, **knobs):
    """The decisions on ``profile``; complex pairs count as templated unless a knob says not."""
    import tvm
    from tvm_fusion_hw.pipeline import fused_module

    knobs.setdefault("pair_templates", BOTH_PAIRS)
    knobs.setdefault("winograd", "off")  # the conv -> pool rule's cases: the convs stay direct
    fuse = hw.HardwareAwareFuseOps(profile, planners=planners or template_planners(), **knobs)
    mod, _, _ = runner.module(model, batch)
    fused_module(mod, tvm.target.Target({"kind": "llvm"}), fuse)
    return fuse.report


def complex_pairs(report):
    return report.find("complex-pair")


def conv_pool_tile(runner, profile, batch):
    """The tile ConvPool plans for conv_relu_pool's fused PrimFunc on ``profile`` (the pair forced)."""
    from tvm_fusion_hw.pipeline import fused_module
    from tvm_fusion_hw.schedules.conv_pool.rule import ConvPool

    target = hw.target(profile)
    fuse = hw.fusion_pass(target, pair_templates=("conv->window",), max_occupancy_drop=0.99, pair_cost=False,
                          winograd="off")
    mod, _, _ = runner.module("conv_relu_pool", batch)
    fused = fused_module(mod, target, fuse)
    return ConvPool().plan(fused["fused_conv2d_add_relu_max_pool2d"], target)[1]


# ---- conv -> pool: the template's plan --------------------------------------------------------
@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-rtx-3060", "amd-mi300x", "amd-mi250x"])
@pytest.mark.parametrize("batch", [1, 32])
def test_conv_pool_decision_uses_the_templates_plan(runner, profile, batch):
    """The fused kernel's threads, registers and shared memory are those ConvPool plans for the
    fused PrimFunc (asked on the two unfused PrimFuncs); the decision follows from them."""
    (pair,) = complex_pairs(report_for(runner, "conv_relu_pool", profile, batch))
    tile = conv_pool_tile(runner, profile, batch)
    fig = pair.figures
    assert fig["figures_from"] == "ConvPool template's plan"
    assert (fig["plan_threads_per_block"], fig["plan_registers_per_thread"], fig["plan_shared_bytes"],
            fig["plan_blocks"]) == (tile.threads, tile.registers_estimate, tile.shared_bytes, tile.blocks)
    fused = occupancy(hw.load_profile(profile), tile.threads, tile.registers_estimate, tile.shared_bytes)
    assert fig["fused_occupancy"] == round(fused.occupancy, 3)
    assert "intermediate_tile_bytes" not in fig  # the policy's own tile model is not asked
    assert f"ConvPool template's plan ({tile.threads} threads/block, ~{tile.registers_estimate} " \
           f"regs/thread, {tile.shared_bytes / 1024:.1f} KiB shared/block)" in pair.reason
    fits = fig["occupancy_drop"] <= 0.20
    assert pair.staged == (not fits)
    if fits:  # a plan that fits is then weighed by both plans' calibrated times (fusion/pair_cost.py)
        assert pair.fused == (fig["cost_fused_us"] < fig["cost_apart_us"]), pair.reason
    assert fig["plan_shared_bytes"] <= fig["shared_bytes_per_block_limit"]


def test_conv_pool_that_fits_but_costs_more_stays_apart(runner):
    """MI250X, batch 1: ConvPool's plan raises the occupancy (6 -> 10 waves a CU), but at its 15
    FLOP/B ridge the fused kernel's modelled time, corrected by ConvPool's error measured on the
    H200, exceeds the conv's and the pool's apart: two kernels, not staged (nothing was refused)."""
    (pair,) = complex_pairs(report_for(runner, "conv_relu_pool", "amd-mi250x"))
    assert not pair.fused and not pair.staged
    assert pair.figures["occupancy_drop"] < 0 and pair.figures["cost_fused_us"] > pair.figures["cost_apart_us"]
    assert pair.reason.startswith("conv -> window: apart: the ConvPool template's plan")
    assert "the fused kernel's extra work costs more than the round trip it saves" in pair.reason
    # The same pair without the cost rule: the fit alone fuses it.
    (fits,) = complex_pairs(report_for(runner, "conv_relu_pool", "amd-mi250x", pair_cost=False))
    assert fits.fused and "break-even" not in fits.reason


def test_vgg_last_conv_pool_pair_is_kept_apart_on_the_h200(runner):
    """VGG-11 at batch 1 on the H200: of the five conv -> 2x2 max-pool pairs only the last (512
    channels at 14x14, 196 output pixels a channel) costs more fused than apart once ConvPool's
    measured error weighs the plans; on the H200 it took 460 us fused against 61 + 5 us apart
    (bench/results/2026-12-02-h200-corpus-6/conv_pool_calibration.md)."""
    pairs = [d for d in complex_pairs(report_for(runner, "corpus:vgg11_bn", "nvidia-h200"))
             if d.reason.startswith("conv -> window: ")]
    assert [d.fused for d in pairs] == [True, True, True, True, False], [d.reason for d in pairs]
    assert "apart" in pairs[-1].reason and not pairs[-1].staged


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-rtx-3060", "amd-mi300x"])
def test_conv_pool_fuses_where_the_template_fits(runner, profile):
    """Batch 32: the policy's own tile model (a shared-memory tile of 2 warps of pixels x the pool
    window x 32 channels) refused the pair on the RTX 3060 (occupancy) and the MI300X (72 KiB of
    LDS); ConvPool keeps the conv outputs in registers and stages 8-29 KiB of operands, and its
    plan keeps the occupancy of the unfused conv as ImplicitGemm plans it."""
    (planned,) = complex_pairs(report_for(runner, "conv_relu_pool", profile, 32))
    assert planned.fused, planned.reason
    assert planned.reason.startswith("conv -> window: one kernel, the ConvPool template's plan")
    assert planned.figures["unfused_occupancy_from"] == "unfused, ImplicitGemm plan"
    # The same pair judged by the tile model (the template registered as a plain check).
    from tvm_fusion_hw.schedules.conv_pool.rule import supports_pair

    check = planners_with({"conv->window": supports_pair})
    (modelled,) = complex_pairs(report_for(runner, "conv_relu_pool", profile, 32, planners=check))
    assert modelled.figures["figures_from"] == "policy tile model"
    assert modelled.fused == (profile == "nvidia-h200"), modelled.reason


def test_plan_that_does_not_fit_is_staged(runner):
    """MI300X, batch 1: ConvPool's best tile stages 18 KiB of operands in 64-thread blocks, 3 waves
    a CU against the unfused conv's 6 (ImplicitGemm's plan): a 50% drop. Staged: two kernels, one
    global round trip."""
    report = report_for(runner, "conv_relu_pool", "amd-mi300x")
    (pair,) = complex_pairs(report)
    assert not pair.fused and pair.staged and pair in report.staged()
    assert pair.reason.startswith("conv -> window: staged: the ConvPool template's plan (64 threads/block")
    assert "18.0 KiB shared/block" in pair.reason
    assert "occupancy" in pair.reason and "drops" in pair.reason and "unfused, ImplicitGemm plan)" in pair.reason
    assert "two kernels, one global round trip of the intermediate (6.42 MB written and read back)" in pair.reason
    assert pair.figures["occupancy_drop"] > 0.20
    assert pair.figures["round_trip_bytes"] == 2 * 64 * 112 * 112 * 4  # conv output written, read back
    assert [g.members for g in report.groups][-1] == ["max_pool2d"]
    text = str(report)
    assert "stage [complex-pair] conv2d+add+relu -> max_pool2d: conv -> window: staged:" in text
    assert "1 of them staged: one global round trip" in text


# ---- the pair-template protocol as the policy uses it (the protocol itself: test_plans.py) ------
def out_shape(func):
    """The shape of a PrimFunc's last parameter (its output)."""
    return tuple(int(d) for d in func.params[-1].ty.shape)


def part_plans(plan):
    """Every unfused part planned as ``plan`` (the occupancy baseline, independent of ImplicitGemm)."""
    return lambda func, target: plan


@pytest.mark.parametrize("planned, staged_by", [
    (KernelPlan("Fake", 256, 32, 240 * 1024), "more than 227 KiB shared memory per block"),
    (KernelPlan("Fake", 64, 300, 1024), "more than 255 regs/thread"),
    (KernelPlan("Fake", 256, 128, 4096), "drops 75% > 20%"),  # 16 warps against 64
    (None, None),
    (SimpleNamespace(threads=256, registers_estimate=32, shared_bytes=4096, blocks=392), None),
])
def test_a_planner_decides_with_its_plan(runner, planned, staged_by):
    asked = []

    def planner(producer, consumer, target):
        asked.append((out_shape(producer), out_shape(consumer), str(target.tag)))
        return planned

    planners = planners_with({"conv->window": planner},
                             kernel_plan=part_plans(KernelPlan("Part", 256, 32, 0)))  # 64 warps an SM
    (pair,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-h200", planners=planners))
    assert asked == [((1, 64, 112, 112), (1, 64, 56, 56), "nvidia-h200")]  # the unfused conv, pool
    if planned is None:
        assert not pair.fused and not pair.staged
        assert "the conv->window template cannot run this pair" in pair.reason
    elif staged_by:
        assert not pair.fused and pair.staged, pair.reason
        assert pair.reason.startswith("conv -> window: staged: the Fake template's plan") and staged_by in pair.reason
        assert "one global round trip" in pair.reason
    else:  # a rule's tile, duck-typed: threads, registers_estimate, shared_bytes
        assert pair.fused, pair.reason
        assert pair.figures["plan_blocks"] == 392 and "unfused, Part plan)" in pair.reason


def test_a_plain_check_still_works(runner):
    """A check ``(producer, consumer) -> bool`` gives no plan: the policy's own tile model judges
    the fit, as before plans (and as a depthwise->pointwise check registered later will)."""
    calls = []
    check = planners_with({"conv->window": lambda producer, consumer: calls.append(1) or True})
    (h200,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-h200", planners=check))
    assert h200.fused and calls, h200.reason
    assert h200.figures["figures_from"] == "policy tile model"
    assert h200.figures["intermediate_tile_bytes"] == 64 * 4 * 32 * 4  # 2 warps of pixels x 2x2 x 32 channels
    assert h200.reason.startswith("conv -> window: 32.0 KiB tile in shared memory")
    (rtx,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-rtx-3060", planners=check))
    assert not rtx.fused and rtx.staged and rtx.figures["occupancy_drop"] > 0.20
    assert rtx.reason.startswith("conv -> window: staged: occupancy") and "(policy tile model)" in rtx.reason
    assert "one global round trip" in rtx.reason
    (amd,) = complex_pairs(report_for(runner, "conv_relu_pool", "amd-mi300x", planners=check))
    assert amd.figures["intermediate_tile_bytes"] == 2 * h200.figures["intermediate_tile_bytes"]  # wave64
    assert amd.staged and "exceeds 64 KiB" in amd.reason
    declines = planners_with({"conv->window": lambda producer, consumer: False})
    (declined,) = complex_pairs(report_for(runner, "conv_relu_pool", "nvidia-h200", planners=declines))
    assert not declined.fused and "template does not take this pair" in declined.reason
    # A depthwise->pointwise check registered the same way.
    seen = []
    dw_check = planners_with({"depthwise_conv->pointwise_conv":
                              lambda producer, consumer: seen.append(out_shape(producer)) or True})
    (dw_pw,) = complex_pairs(report_for(runner, "dw_pw", "nvidia-h200", planners=dw_check))
    assert dw_pw.fused and seen == [(1, 144, 56, 56)] and dw_pw.figures["figures_from"] == "policy tile model"


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-rtx-3060", "amd-mi300x"])
def test_memory_bound_chain_is_one_group(runner, profile):
    report = report_for(runner, "eltwise5", profile)
    assert len(report.groups) == 1 and len(report.groups[0].members) == 5
    assert report.groups[0].regime == "memory-bound"
    # Five ops in one group: four merges, each a memory-bound chain (not vacuously "all" of none).
    chains = report.find("chain")
    assert len(chains) == len(report.decisions) == 4, [d.rule for d in report.decisions]
    assert all(d.fused for d in report.decisions)
    assert all("memory-bound chain" in d.reason for d in chains)


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
    fuse = hw.fusion_pass("nvidia-h200", target_occupancy=1.0)
    import tvm
    from tvm_fusion_hw.pipeline import fused_module

    mod, _, _ = runner.module("eltwise5")
    fused_module(mod, tvm.target.Target({"kind": "llvm"}), fuse)
    refused = fuse.report.refused()
    assert refused and all(d.rule == "depth" for d in refused)
    assert len(fuse.report.groups) > 1


def test_regime_is_relative_to_the_ridge_point():
    """20 FLOP/B is compute-bound on the H200 (ridge 14) and memory-bound on the RTX 3060 (35)."""
    from tvm_fusion_hw.fusion.analysis import GroupCost

    cost = GroupCost(flops=20e6, compulsory_bytes=1_000_000, saved_bytes=0, live_values=1, members=1)
    assert cost.regime(hw.load_profile("nvidia-h200")) == "compute-bound"
    assert cost.regime(hw.load_profile("nvidia-rtx-3060")) == "memory-bound"
    # The roofline time bound follows the same split: compute time on one, memory time on the other.
    assert cost.roofline_seconds(hw.load_profile("nvidia-h200")) == pytest.approx(20e6 / 67e12)
    assert cost.roofline_seconds(hw.load_profile("nvidia-rtx-3060")) == pytest.approx(1e6 / 360e9)


@pytest.mark.parametrize("knob, value", [("target_occupancy", 0), ("max_occupancy_drop", 1.5), ("max_depth", 0)])
def test_bad_knobs_are_one_line_errors(knob, value):
    with pytest.raises(hw.FusionHWError, match=knob):
        hw.fusion_pass("nvidia-h200", **{knob: value})


def test_unknown_knob_lists_known_ones():
    with pytest.raises(hw.FusionHWError, match="target_occupancy"):
        hw.fusion_pass("nvidia-h200", occupancy=0.3)
