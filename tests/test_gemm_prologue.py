"""Tests for GEMM prologues: element-wise producers computed inside a contraction's operand loads.

Stock FuseOps leaves ``x * s`` (a squeeze-and-excitation scale) and the 1x1 conv that reads it in
two kernels; fusion/prologue_rule.py merges them where ImplicitGemm plans the fused kernel, and
schedules/gemm computes the producer inside its shared-memory copies. CPU only; checked:
- the work a prologue adds is counted from the TIR the same way before fusion (the producer's
  PrimFunc) and after it (the fused kernel's operand): a copy or a padding guard costs nothing;
- the fusion: the scale joins the conv's group (one kernel), not with ``gemm_prologues=False``,
  never under stock FuseOps, not into a depthwise conv (its template stages a halo tile); a matmul
  takes a prologue on either operand;
- the plan the policy asks before fusion is the plan the rule makes of the fused kernel;
- a computed operand gets no ``cp.async`` tile (the copy computes), where the same GEMM without
  the prologue gets one;
- the schedules compute what the unscheduled fused PrimFunc computes (1x1, padded 3x3, split K,
  matmul operand B), and build for sm_90 without spills, with the shared memory the plan states
  and registers within its estimate;
- a fused kernel no template schedules is refused and staged on the rebuild, as complex pairs are.
"""

import dataclasses

import pytest
import tvm
from tvm import relax, s_tir, te, topi

import tvm_fusion_hw as hw
from tvm_fusion_hw.fusion.prologue_rule import GEMM_PROLOGUE
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.pipeline import fused_module, unscheduled_pairs
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.base.prologue import func_instructions, operand_instructions
from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm, prologue_plan
from tvm_fusion_hw.schedules.gemm.tiles import rank_tiles
from tir_checks import assert_schedule_preserves_numerics, prim_funcs, ptxas_kernels

H200 = "nvidia-h200"


# ---- PrimFuncs built by hand: the producer, the consumer, and the two fused ----------------------
def _scale(x, s):
    return te.compute(x.shape, lambda n, c, h, w: x[n, c, h, w] * s[n, c, 0, 0], name="multiply")


def _conv(data, w, b, pad):
    conv = topi.nn.conv2d_nchw(data, w, 1, pad, 1)
    return te.compute(conv.shape, lambda n, o, h, w_: conv[n, o, h, w_] + b[0, o, 0, 0], name="add")


def prologue_funcs(n=2, c=96, size=14, o=24, k=1):
    """``(producer, consumer, fused)`` PrimFuncs of ``conv(x * s) + b``."""
    x = te.placeholder((n, c, size, size), name="x")
    s = te.placeholder((n, c, 1, 1), name="s")
    w = te.placeholder((o, c, k, k), name="w")
    b = te.placeholder((1, o, 1, 1), name="b")
    xs_in = te.placeholder((n, c, size, size), name="xs")
    scaled = _scale(x, s)
    producer = te.create_prim_func([x, s, scaled])
    consumer = te.create_prim_func([xs_in, w, topi.nn.conv2d_nchw(xs_in, w, 1, k // 2, 1)])
    fused = te.create_prim_func([x, s, w, b, _conv(scaled, w, b, k // 2)])
    return producer, consumer, fused


def _named(func):
    return func.with_attr("global_symbol", "main")


# ---- (1) the work a prologue adds, counted from the TIR ----------------------------------------
def test_a_copy_costs_nothing_and_a_scale_two_instructions():
    producer, consumer, fused = prologue_funcs()
    assert func_instructions(producer) == 2  # a load of s, a multiply
    assert func_instructions(consumer) == 0  # the conv's reduction block is not element-wise work
    sch = s_tir.Schedule(fused)
    conv = sch.get_sblock("conv2d_nchw")
    assert operand_instructions(sch, conv, 0) == 2
    assert operand_instructions(sch, conv, 1) == 0  # the weights: a parameter
    # a padded conv of the scaled input: the padding guard chooses a load or a zero (no work)
    _, _, padded = prologue_funcs(k=3)
    sch = s_tir.Schedule(padded)
    assert operand_instructions(sch, sch.get_sblock("conv2d_nchw"), 0) == 2
    _, plain, _ = prologue_funcs(k=3)
    sch = s_tir.Schedule(plain)
    assert operand_instructions(sch, sch.get_sblock("conv2d_nchw"), 0) == 0


# ---- (2) the fusion ----------------------------------------------------------------------------
SE_SHAPES = dict(x=(2, 96, 14, 14), s=(2, 96, 1, 1), w=(24, 96, 1, 1), b=(1, 24, 1, 1))


def se_scale_module(weights=(24, 96, 1, 1), depthwise=False):
    """``conv(x * s, w) + b``: an SE block's scale and the conv after it, as a Relax module."""
    bb = relax.BlockBuilder()
    shapes = dict(SE_SHAPES, w=weights, b=(1, weights[0], 1, 1))
    x, s, w, b = (relax.Var(k, relax.TensorType(shapes[k], "float32")) for k in ("x", "s", "w", "b"))
    with bb.function("main", [x, s, w, b]):
        with bb.dataflow():
            scaled = bb.emit(relax.op.multiply(x, s))
            conv = bb.emit(relax.op.nn.conv2d(scaled, w, padding=weights[-1] // 2,
                                              groups=weights[0] if depthwise else 1))
            out = bb.emit_output(relax.op.add(conv, b))
        bb.emit_func_output(out)
    return bb.get()


def kernels(mod, fuse):
    target = hw.target(H200)
    return sorted(prim_funcs(fused_module(mod, target, fuse)))


def test_the_scale_joins_the_conv_only_with_the_rule():
    target = hw.target(H200)
    mod = se_scale_module()
    assert kernels(mod, hw.fusion_pass(target)) == ["fused_multiply_conv2d_add"]
    assert kernels(mod, hw.fusion_pass(target, gemm_prologues=False)) == ["fused_conv2d_add", "multiply"]
    assert kernels(mod, None) == ["fused_conv2d_add", "multiply"]  # stock FuseOps
    # a depthwise conv's template stages a halo tile: no prologue, and the decision says why
    fuse = hw.fusion_pass(target)
    assert kernels(se_scale_module((96, 1, 3, 3), depthwise=True), fuse) == ["fused_conv2d_add", "multiply"]
    refused = [d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE]
    assert len(refused) == 1 and not refused[0].fused and "depthwise_conv" in refused[0].reason


def _producer_chain_module(kind):
    """``conv(slice(concat(x, x, x)))`` (a ghost module's channel slice) or ``conv(x * s + 1)``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 48 if kind == "slice" else 96, 14, 14), "float32"))
    s = relax.Var("s", relax.TensorType((2, 96, 1, 1), "float32"))
    w = relax.Var("w", relax.TensorType((24, 96, 1, 1), "float32"))
    with bb.function("main", [x, s, w]):
        with bb.dataflow():
            if kind == "slice":
                cat = bb.emit(relax.op.concat([x, x, x], axis=1))
                operand = bb.emit(relax.op.strided_slice(cat, axes=[1], begin=[0], end=[96]))
            else:
                scaled = bb.emit(relax.op.multiply(x, s))
                operand = bb.emit(relax.op.add(scaled, relax.const(1.0, "float32")))
            out = bb.emit_output(relax.op.nn.conv2d(operand, w))
        bb.emit_func_output(out)
    return bb.get()


def test_a_producer_is_offered_with_its_chain():
    """Prologues are proposed after the chains: a slice of a concatenation stays with the
    concatenation (one kernel writing the slice; offered alone, the slice would take the conv and
    leave the concatenation writing every channel), and two element-wise ops join the conv together."""
    target = hw.target(H200)
    fuse = hw.fusion_pass(target)
    assert kernels(_producer_chain_module("slice"), fuse) == ["conv2d", "fused_concatenate_strided_slice"]
    assert not [d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE and d.fused]
    fuse = hw.fusion_pass(target)
    assert kernels(_producer_chain_module("chain"), fuse) == ["fused_multiply_add_conv2d"]
    (decision,) = [d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE]
    assert decision.fused and decision.producer == "multiply+add"


def test_the_profile_decides_a_large_scale():
    """EfficientNet-B0's last SE scale at batch 32 (32x1152x7x7 into a 1152->320 conv): its round
    trip is small against the conv, so on the H200 (ridge 14 FLOP/B) the fused kernel's measured
    extra work (fusion/calibrations.py) costs more than it saves and the two stay apart; on the RTX
    3060 (ridge 35 FLOP/B, bandwidth short) the same round trip costs more and they fuse."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((32, 1152, 7, 7), "float32"))
    s = relax.Var("s", relax.TensorType((32, 1152, 1, 1), "float32"))
    w = relax.Var("w", relax.TensorType((320, 1152, 1, 1), "float32"))
    with bb.function("main", [x, s, w]):
        with bb.dataflow():
            scaled = bb.emit(relax.op.multiply(x, s))
            out = bb.emit_output(relax.op.nn.conv2d(scaled, w))
        bb.emit_func_output(out)
    mod = bb.get()
    decisions = {}
    for profile in (H200, "nvidia-rtx-3060"):
        fuse = hw.fusion_pass(hw.target(profile))
        decisions[profile] = (kernels(mod, fuse), next(d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE))
    (h200_kernels, h200), (rtx_kernels, rtx) = decisions[H200], decisions["nvidia-rtx-3060"]
    assert h200_kernels == ["conv2d", "multiply"] and rtx_kernels == ["fused_multiply_conv2d"]
    assert "ridge 14.0 FLOP/B < break-even" in h200.reason and "ridge 35.4 FLOP/B >= break-even" in rtx.reason
    assert h200.figures["break_even_ridge_flop_per_byte"] > 14.0 and rtx.figures["break_even_ridge_flop_per_byte"] < 35.4


@pytest.mark.parametrize("operand", [0, 1])
def test_a_matmul_takes_a_prologue_on_either_operand(operand):
    target = hw.target(H200)
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((64, 128), "float32"))
    b = relax.Var("b", relax.TensorType((128, 96), "float32"))
    s = relax.Var("s", relax.TensorType((1, 96) if operand else (64, 1), "float32"))
    with bb.function("main", [a, b, s]):
        with bb.dataflow():
            scaled = bb.emit(relax.op.multiply(b if operand else a, s))
            out = bb.emit_output(relax.op.matmul(a, scaled) if operand else relax.op.matmul(scaled, b))
        bb.emit_func_output(out)
    fuse = hw.fusion_pass(target)
    assert kernels(bb.get(), fuse) == ["fused_multiply_matmul"]
    decision = next(d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE)
    assert decision.fused and decision.figures["operand"] == operand


# ---- (3) the plan asked before fusion is the rule's plan of the fused kernel -------------------
@pytest.mark.parametrize("shape", [dict(), dict(n=32, c=576, size=7, o=96), dict(k=3, c=64, o=64)])
def test_the_policy_asks_the_plan_the_rule_makes(shape):
    target = hw.target(H200)
    producer, consumer, fused = prologue_funcs(**shape)
    with hw.pass_context(target):
        asked = prologue_plan([producer], consumer, 0, target)
        problem, tile = ImplicitGemm().plan(_named(fused), target)
    assert problem.prologue_instructions == (2, 0)
    assert (asked.threads_per_block, asked.shared_bytes, asked.registers_per_thread, asked.blocks) == \
        (tile.threads, tile.shared_bytes, tile.registers_estimate, tile.blocks)
    assert asked.time_s == pytest.approx(tile.time_s)


def test_a_computed_copy_keeps_its_loads_in_flight():
    """Without prefetch, a tile whose threads compute more than 4 elements of an operand a K step
    waits on their loads in turn (ptxas interleaves them with the stores), and the model says so:
    GhostNet's scale into a 480->56 conv at batch 32 gets a tile computing at most 4 a step (or
    prefetching), where the conv alone keeps the 8-a-step tile it measured at."""
    producer, consumer, fused = prologue_funcs(n=32, c=480, size=14, o=56)
    target = hw.target(H200)
    with hw.pass_context(target):
        _, tile = ImplicitGemm().plan(_named(fused), target)
        _, alone = ImplicitGemm().plan(_named(consumer), target)
    assert tile.prefetch or tile.block_rows * tile.depth_step // tile.threads <= 4
    assert not alone.prefetch and alone.block_rows * alone.depth_step // alone.threads == 8


def test_a_computed_operand_gets_no_cp_async_tile():
    target = hw.target(H200)
    _, _, fused = prologue_funcs(n=32, c=768, o=256)
    with hw.pass_context(target):
        problem, _ = ImplicitGemm().plan(_named(fused), target)
        config = ImplicitGemm().get_config(target)
    limits = gpu_limits(target)
    computed = rank_tiles(problem, limits, config)
    copied = rank_tiles(dataclasses.replace(problem, prologue_instructions=(0, 0)), limits, config)
    assert computed and not any(t.async_stages for t in computed)
    assert any(t.async_stages for t in copied)  # the same GEMM, its operand copied: cp.async tiles


# ---- (4) the schedules compute the same, and build as planned ----------------------------------
CASES = {
    "1x1": dict(),
    "1x1 split K": dict(n=32, c=576, size=7, o=96),
    "3x3 padded": dict(k=3, c=64, o=64),
    "1x1 register prefetch": dict(n=32, c=768, o=256),
}


@pytest.fixture(scope="module")
def scheduled():
    """{case: (fused PrimFunc, its schedule, its tile)} on the H200 profile, no cp.async (LLVM runs them)."""
    target = hw.target(H200)
    out = {}
    for case, shape in CASES.items():
        _, _, fused = prologue_funcs(**shape)
        with target:
            _, tile, sch = ImplicitGemm().schedule_best(_named(fused), target)
        out[case] = (fused, sch, tile)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_prologue_schedules_compute_the_same(scheduled, case):
    fused, sch, tile = scheduled[case]
    assert_schedule_preserves_numerics(fused, sch, reassociates=tile.split_k > 1)


def test_some_case_splits_k_and_some_prefetches(scheduled):
    """The cases cover the schedule's paths, so that the numerics above mean something."""
    tiles = [t for _, _, t in scheduled.values()]
    assert any(t.split_k > 1 for t in tiles) and any(t.prefetch for t in tiles)


@pytest.mark.parametrize("case", sorted(CASES))
def test_prologue_kernels_build_as_planned_for_sm90(scheduled, case):
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    _, sch, tile = scheduled[case]
    target = hw.target(H200)
    with target:
        ex = tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=target)
    kernels_ = ptxas_kernels(ex.mod.imports[0].inspect_source())
    main = kernels_["main_kernel"]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_frame_bytes == 0
    assert main.shared_bytes == tile.shared_bytes
    assert main.registers <= tile.registers_estimate + 8


# ---- (5) never break: a fused kernel no template schedules is staged on the rebuild -------------
def test_an_unscheduled_prologue_is_refused_like_a_pair():
    target = hw.target(H200)
    fuse = hw.fusion_pass(target)
    assert kernels(se_scale_module(), fuse) == ["fused_multiply_conv2d_add"]
    decision = next(d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE)
    group = next(g for g in fuse.report.groups if g.kernel == "fused_multiply_conv2d_add")
    failure = type("F", (), {"kernel": group.kernel, "rule": "ImplicitGemm", "stage": "schedule",
                             "error": "ValueError"})()
    log = type("L", (), {"fallbacks": [failure], "rules": {group.kernel: "Fallback"}})()
    schedule = type("S", (), {"log": log, "templates": [ImplicitGemm()]})()
    refused = unscheduled_pairs(fuse.report, schedule)
    assert [(r.producer_ops, r.consumer_ops) for r in refused] == \
        [(tuple(decision.figures["producer_ops"]), tuple(decision.figures["consumer_ops"]))]
    again = hw.fusion_pass(target, refused_pairs=refused)
    assert kernels(se_scale_module(), again) == ["fused_conv2d_add", "multiply"]
    staged = next(d for d in again.report.decisions if d.rule == GEMM_PROLOGUE)
    assert not staged.fused and "ImplicitGemm template failed" in staged.reason
