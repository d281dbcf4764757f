"""The register feedback loop (tvm_fusion_hw.feedback) and the depth cap per profile.

Two kinds of test. With a fake ``measure`` (a stand-in for ptxas whose register count grows with a
kernel's pointer parameters) the loop's logic is checked on any machine: a spilling group, or one
that loses more than 20% of its parts' occupancy, is split, and the report shows before and after.
With the real ``measure`` (ptxas through nvcc/NVRTC, AMDGPU metadata) the rules' register case is
built for the H200, the Jetson AGX Orin and the MI300X; those tests skip without the toolchain.
"""

import dataclasses
import math
import re
import warnings

import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import kernel_launches, ptxas
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.feedback.split_loop import compile_with_feedback
from tvm_fusion_hw.feedback.kernel_resources import KernelResources
from tvm_fusion_hw.hardware.occupancy import register_budget
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.fusion.policy import FusionPolicy, GroupSplit, PolicyConfig

H200 = "nvidia-h200"
LLVM = tvm.target.Target({"kind": "llvm"})


def chain(inputs, shape=(1024, 1024), copies=1):
    """acc = x0; acc = acc (+|*) x_i: ``inputs - 1`` element-wise ops, every input read once (the
    ops named v0, v1, ...); ``copies`` such chains side by side on inputs of their own."""
    bb = relax.BlockBuilder()
    xs = [[relax.Var(f"x{c}_{i}", relax.TensorType(shape, "float32")) for i in range(inputs)] for c in range(copies)]
    with bb.function("main", [x for row in xs for x in row]):
        with bb.dataflow():
            outs = []
            for c, row in enumerate(xs):
                acc = row[0]
                for i, x in enumerate(row[1:]):
                    op = relax.op.add if i % 2 == 0 else relax.op.multiply
                    acc = bb.emit(op(acc, x), f"v{i}" if copies == 1 else f"c{c}v{i}")
                outs.append(acc)
            out = bb.emit_output(outs[0] if copies == 1 else relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def tree(inputs, shape=(1024, 1024)):
    """The inputs combined pairwise, level by level (add, then multiply): all of them are live."""
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i in range(inputs)]
    with bb.function("main", xs):
        with bb.dataflow():
            level, values = 0, list(xs)
            while len(values) > 1:
                op = relax.op.add if level % 2 == 0 else relax.op.multiply
                paired = [bb.emit(op(values[i], values[i + 1])) for i in range(0, len(values) - 1, 2)]
                values, level = paired + values[len(paired) * 2:], level + 1
            out = bb.emit_output(values[0])
        bb.emit_func_output(out)
    return bb.get()


# ---- a fake ptxas: registers from the kernel's pointer parameters ------------------------------
_KERNEL = re.compile(r"__launch_bounds__\((\d+)\)\s+(\w+)\(([^)]*)\)\s*\{")


def fake_measure(registers_of, spill_of=lambda pointers: 0):
    """``measure(executable, target)`` reading CUDA source only (no nvcc): one kernel per definition."""
    def measure(executable, _target):
        (cuda,) = kernel_launches.device_modules(executable, ["cuda"])
        return [KernelResources(name, registers_of(params.count("*")), spill_of(params.count("*")),
                                spill_of(params.count("*")), 0, int(threads), "estimate")
                for threads, name, params in _KERNEL.findall(cuda.inspect_source("cuda"))]
    return measure


def test_spilling_group_is_split_and_reported():
    """Nine ops over ten inputs: the fused kernel has 11 pointers, spills; halves of 5 + 4 ops do not."""
    measure = fake_measure(lambda p: 64 if p > 8 else 24, lambda p: 128 if p > 8 else 0)
    result = compile_with_feedback(chain(10), hw.target(H200), measure=measure)
    assert len(result.rounds) == 2 and result.rounds[0].split == ["fused_add_multiply"]
    (split,) = result.report.splits
    assert split.before["spill_bytes"] == 256 and split.before["registers"] == 64
    assert split.before["parts_registers"] == 24 and split.reason.startswith("spills 256 B")
    assert sorted(a["ops"] for a in split.after) == [4, 5]
    assert all(a["spill_bytes"] == 0 and a["registers"] == 24 for a in split.after)
    (refused,) = result.report.find("feedback-split")
    assert "64 regs, 256 B spilled" in refused.reason and "at most 5 of its 9 ops" in refused.reason
    assert refused.figures["spill_bytes"] == 256
    assert sorted(len(g.members) for g in result.report.groups) == [4, 5]
    text = str(result.report)
    assert "Register feedback (1 split(s))" in text and "after: fused_" in text


def test_occupancy_drop_beyond_the_limit_is_split():
    """40 registers take two 1024-thread blocks to one on an H200 (100% -> 50%): a 50% drop."""
    measure = fake_measure(lambda p: 40 if p > 8 else 24)
    (split,) = compile_with_feedback(chain(10), hw.target(H200), measure=measure).report.splits
    assert (split.before["occupancy"], split.before["parts_occupancy"]) == (0.5, 1.0)
    assert "drops 50% > 20%" in split.reason
    assert all(a["occupancy"] == 1.0 for a in split.after)
    # The limit is the knob: 50% is within a 60% allowance.
    kept = compile_with_feedback(chain(10), hw.target(H200), measure=measure, max_occupancy_drop=0.6)
    assert not kept.report.splits and len(kept.rounds) == 1
    assert any(n.startswith("kept: fused_add_multiply (9 ops up to v8): 40 regs") for n in kept.report.feedback)


def test_every_call_of_a_shared_fused_function_is_split():
    """Equal groups share one fused function (BlockBuilder dedups): each call is a group of its own."""
    measure = fake_measure(lambda p: 32, lambda p: 64 if p > 4 else 0)  # 4 ops on 5 inputs spill
    result = compile_with_feedback(chain(5, copies=2), hw.target(H200), measure=measure)
    assert [g["function"] for g in result.rounds[0].groups] == ["fused_add_multiply"] * 2
    first, second = result.report.splits
    assert first.members == ["c0v0", "c0v1", "c0v2", "c0v3"] and second.members[0] == "c1v0"
    assert len(result.rounds) == 2 and sorted(len(g.members) for g in result.report.groups) == [2, 2, 2, 2]


def test_round_limit_leaves_the_group_and_says_so():
    measure = fake_measure(lambda p: 64, lambda p: 8 * p)  # spills grow with the inputs: halves spill too
    result = compile_with_feedback(chain(10), hw.target(H200), max_rounds=2, measure=measure)
    assert len(result.rounds) == 2 and len(result.report.splits) == 1
    assert any(n.startswith("still over, no round left") for n in result.report.feedback)
    # A spill its parts have as well is no reason to split: they would spill apart all the same.
    same = compile_with_feedback(chain(10), hw.target(H200), measure=fake_measure(lambda p: 64, lambda p: 8))
    assert not same.report.splits and same.report.feedback[1].startswith("kept: fused_add_multiply (9 ops up to v8)")
    with pytest.raises(hw.FusionHWError, match="max_rounds"):
        compile_with_feedback(chain(3), hw.target(H200), max_rounds=0)


@pytest.mark.filterwarnings("ignore:measuring CUDA kernels needs nvcc")
def test_without_a_compiler_one_round_on_estimates(monkeypatch):
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: None)
    monkeypatch.setattr(ptxas, "have_nvrtc", lambda: False)
    with pytest.warns(UserWarning, match="estimates only"):
        result = compile_with_feedback(chain(4), hw.target(H200))
    assert len(result.rounds) == 1 and not result.rounds[0].kernels and not result.report.splits
    assert "estimates only" in str(result.report)


# ---- the split key in the pass itself ----------------------------------------------------------
def lowered(mod):
    return tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()])(mod)


def test_a_split_group_keeps_at_most_half_of_its_ops():
    names = tuple(f"v{i}" for i in range(5))
    split = GroupSplit(names, "measured: 64 regs")
    fuse = hw.fusion_pass(H200, split_groups=(split,))
    fuse(lowered(chain(6)))
    assert sorted(len(g.members) for g in fuse.report.groups) == [2, 3]
    (refused,) = fuse.report.find("feedback-split")
    assert refused.reason.startswith("measured: 64 regs; at most 3 of its 5 ops")
    with pytest.raises(hw.FusionHWError, match="split_groups"):
        hw.fusion_pass(H200, split_groups=(GroupSplit(("v0",)),))


# ---- real measurements -------------------------------------------------------------------------
PROFILES = ("nvidia-h200", "nvidia-jetson-agx-orin", "amd-mi300x")


def skip_unless_measurable(profile):
    if hw.load_profile(profile).vendor == "amd":
        if not toolchain.have_rocm_toolchain():
            pytest.skip("ROCm toolchain absent (lld-22, rocm-device-libs)")
    elif ptxas.cuda_compiler() is None:
        pytest.skip("neither nvcc nor NVRTC found")


@I.ir_module
class GemmEpilogue:
    """A GEMM whose epilogue reads six more tensors (bias, scales, residuals): "fuse cautiously"."""

    @R.function
    def main(a: R.Tensor((1024, 1024), "float32"), b: R.Tensor((1024, 1024), "float32"),
             r0: R.Tensor((1024, 1024), "float32"), r1: R.Tensor((1024, 1024), "float32"),
             r2: R.Tensor((1024, 1024), "float32"), r3: R.Tensor((1024, 1024), "float32"),
             r4: R.Tensor((1024, 1024), "float32"), r5: R.Tensor((1024, 1024), "float32")):
        with R.dataflow():
            y = R.matmul(a, b)
            y0 = R.add(y, r0)
            y1 = R.multiply(y0, r1)
            y2 = R.add(y1, r2)
            y3 = R.multiply(y2, r3)
            y4 = R.add(y3, r4)
            y5 = R.multiply(y4, r5)
            R.output(y5)
        return y5


def feedback(mod, profile, schedules=True):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nvcc-instead-of-NVRTC note; ROCm without a device
        return compile_with_feedback(mod, hw.target(profile), schedules=schedules)


@pytest.mark.parametrize("profile", PROFILES)
def test_gemm_epilogue_measured_with_dlight_schedules(profile):
    """Measured here (nvcc 13.0 ptxas for sm_90/sm_87; TVM's LLVM 22 for gfx942), dlight's matmul
    with a 128-thread block, and the 6-op epilogue fused into it (7 ops, estimated ~64 regs):

    ========== ======================= ======================= ============================
    profile    matmul alone (parts)    fused, 7 ops            loop
    ========== ======================= ======================= ============================
    H200       64 regs, 50%            62 regs, 50%            kept: no drop
    AGX Orin   64 regs, 67%            64 regs, 67%            kept: no drop
    MI300X     132 VGPRs, 38% (12 w.)  252 VGPRs, 25% (8 w.)   split (-33%): matmul + 3 ops
                                                               154 VGPRs 38%, 3-op chain
                                                               10 VGPRs 100%
    ========== ======================= ======================= ============================

    So the text's "fusion doubles the registers and cuts occupancy" does happen, on the MI300X:
    the fused kernel needs nearly twice the VGPRs of the GEMM alone (2 waves per SIMD instead of
    3). ptxas keeps the same kernel at the GEMM's own register count on both NVIDIA GPUs.
    """
    skip_unless_measurable(profile)
    result = feedback(GemmEpilogue, profile, schedules=False)
    (first,) = result.rounds[0].groups
    assert first["function"] == "fused_matmul_add_multiply"
    assert first["ops"] == 7 and first["spill_bytes"] == 0
    if profile != "amd-mi300x":
        assert not result.report.splits and len(result.rounds) == 1
        assert first["occupancy_drop"] <= 0.2, first
        return
    (split,) = result.report.splits
    assert split.before["registers"] > 1.5 * split.before["parts_registers"]
    assert split.before["occupancy_drop"] > 0.2
    gemm, rest = sorted(split.after, key=lambda a: -a["ops"])
    assert (gemm["ops"], rest["ops"]) == (4, 3)
    assert gemm["registers"] < split.before["registers"]
    assert gemm["occupancy"] >= 0.8 * split.before["parts_occupancy"]
    assert len(result.rounds) == 2 and not result.rounds[1].split


@pytest.mark.parametrize("profile", PROFILES)
def test_gemm_epilogue_measured_with_the_gemm_template(profile):
    """The same group under the plugin's ImplicitGemm template (K-major tiles read 128 bits at a
    time, loops unrolled by nvcc / LLVM), measured as above:

    ========== ======================= ======================= ============================
    profile    matmul alone (parts)    fused, 7 ops            loop
    ========== ======================= ======================= ============================
    H200       167 regs, 19%           168 regs, 19%           kept: no drop
    AGX Orin   111 regs, 33%           113 regs, 33%           kept: no drop
    MI300X     172 VGPRs, 19%          172 VGPRs, 19%          kept: no drop
    ========== ======================= ======================= ============================

    The accumulator tile sets the register count and the epilogue, run once on it at the end,
    adds nothing. With the template's earlier scalar loop, unrolled by TVM, LLVM's AMDGPU backend
    kept the epilogue's operands live across the K loop (142 -> 342 VGPRs) and the loop split the
    group; the measurement, not the rule, decides, so this test follows what is built today.
    """
    skip_unless_measurable(profile)
    result = feedback(GemmEpilogue, profile)
    first = result.rounds[0].groups[0]
    assert first["ops"] == 7 and first["spill_bytes"] == 0
    assert abs(first["registers"] - first["parts_registers"]) <= 4 and first["occupancy_drop"] == 0
    assert not result.report.splits and len(result.rounds) == 1


@pytest.mark.parametrize("profile", PROFILES)
def test_elementwise_tree_measured(profile):
    """Twenty inputs combined pairwise (19 ops, all inputs live): the text's element-wise case made
    as register-heavy as a chain gets. The depth cap (12 / 16 / 28 ops) sizes the group; measured:

    ========== ============= ========== ========================= ==========================
    profile    group         estimate   measured                  loop
    ========== ============= ========== ========================= ==========================
    H200       12 ops        ~64 regs   32 regs, 100% (parts 12)  kept: ptxas stops at 32,
                                                                  two 1024-thread blocks
    AGX Orin   16 ops        ~80 regs   34 regs, 67% (parts 12)   kept: 1536 threads/SM hold
                                                                  one 1024-thread block anyway
    MI300X     19 ops        ~92 regs   25 VGPRs, 100% (parts 5)  kept
    ========== ============= ========== ========================= ==========================

    No split on any: the "5 ops -> 64 registers, 50% -> 25%" of the text does not happen with
    TVM's one-element-per-thread element-wise kernels, and the register estimate is 2-4x high.
    (With the cap loosened, target_occupancy=0.25, the H200 fuses 15 to 27 ops of such trees and
    ptxas still holds every one at 32 registers, without spilling.)
    """
    skip_unless_measurable(profile)
    result = feedback(tree(20), profile)
    assert not result.report.splits and len(result.rounds) == 1
    (group,) = result.rounds[0].groups
    estimated = max(g.estimated_registers for g in result.report.groups)
    assert group["spill_bytes"] == 0 and group["registers"] < estimated
    assert group["occupancy"] == group["parts_occupancy"]


# ---- the depth cap per profile -----------------------------------------------------------------
#: Register budget at 50% occupancy, and the depth cap it gives ((budget - 16) // 4 ops).
CAPS = {
    "amd-mi250x": (128, 28), "amd-mi300x": (128, 28),
    "nvidia-a100-80gb": (64, 12), "nvidia-h100-sxm": (64, 12), "nvidia-h200": (64, 12),
    "nvidia-jetson-agx-orin": (80, 16), "nvidia-rtx-3060": (80, 16), "nvidia-rtx-4090": (80, 16),
}


def budget_from_the_register_file(p):
    """Half the resident warps, spread over 4 SM sub-partitions (NVIDIA) or 4 SIMDs (AMD): the
    registers per thread of one partition's share, rounded down to the allocation granularity."""
    warps_per_partition = math.ceil(math.ceil(p.max_warps_per_multiprocessor * 0.5) / 4)
    per_thread = p.registers_per_multiprocessor // 4 // warps_per_partition // p.warp_size
    return min(per_thread // p.register_allocation_granularity * p.register_allocation_granularity,
               p.max_registers_per_thread)


@pytest.mark.parametrize("name", hw.known_profiles())
def test_depth_cap_derives_from_the_register_budget(name):
    p = hw.load_profile(name)
    policy = FusionPolicy(p)
    assert (policy.register_budget, policy.depth_cap) == CAPS[name]
    assert policy.register_budget == register_budget(p, 0.5) == budget_from_the_register_file(p)
    cfg = PolicyConfig()
    assert policy.depth_cap == (policy.register_budget - cfg.base_registers) // cfg.registers_per_fused_op


def test_where_the_cap_binds_on_a_19_op_tree():
    """The cap binds where it is below 19 ops: every NVIDIA profile, neither AMD one."""
    mod = tree(20)
    binds = {}
    for name in hw.known_profiles():
        fuse = hw.fusion_pass(name)
        fused_module(mod, LLVM, fuse)
        binds[name] = fuse.report.depth_cap_binds() > 0
        assert f"fusion depth cap binds on this module: {'yes' if binds[name] else 'no'}" in str(fuse.report)
    assert binds == {name: CAPS[name][1] < 19 for name in hw.known_profiles()}
    assert fuse.report.to_dict()["budgets"]["fusion depth cap binds on this module"].startswith("yes, ")


def test_cli_feedback_flag(capsys):
    from tvm_fusion_hw.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["compile", "eltwise5", "--feedback", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Register feedback" in out and "feedback round(s)" in out


def test_conv_pool_pair_is_split_only_for_spills():
    """The conv + pool template holds a register tile on purpose (H200 batch 32: 128 registers,
    25% occupancy, and 2.9x faster than stock's two kernels, bench/results/...-after-conv-pool):
    the occupancy rule does not split it; a spill would. Batch 32: there the policy fuses the pair
    on the template's plan clearly (batch 1 sits at its 20% limit against ImplicitGemm's plan)."""
    from tvm_fusion_hw.frontend import import_onnx
    from tvm_fusion_hw.models import build

    mod = import_onnx(build("conv_relu_pool", batch=32))
    low_occupancy = fake_measure(lambda p: 255 if p >= 3 else 24)  # the fused kernel: 1 block/SM
    kept = compile_with_feedback(mod, hw.target(H200), measure=low_occupancy, winograd="off")
    assert not kept.report.splits
    assert any("conv2d" in g.name and "max_pool2d" in g.name for g in kept.report.groups)

    def spilling(executable, target):  # only the fused conv+pool kernel spills
        return [dataclasses.replace(k, spill_store_bytes=64, spill_load_bytes=64)
                if "conv2d" in k.name and "max_pool2d" in k.name else k
                for k in low_occupancy(executable, target)]

    split = compile_with_feedback(mod, hw.target(H200), measure=spilling, winograd="off")
    assert [s.reason.split(" to ")[0] for s in split.report.splits] == ["spills 128 B"]
