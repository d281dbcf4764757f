"""Tests for schedules/window_reduction/: the WindowReduction schedule rule.

CPU only. Checked:
- the rule takes the pools of real models as our fusion for the H200 makes them: PoolFormer's
  token mixer (3x3 average pool, count_include_pad off, fused with ``pool(x) - x``, the layer
  scale and the residual add), ResNet-D's 2x2 stride-2 average-pool shortcut, 3x3 stride-2 max
  pools, odd and prime planes, a short column sum; with one output per thread and the epilogue in
  the same thread (one reduction block left, its accumulator in a register);
- it declines what is not a small window: a row sum along the innermost axis, a global pool
  (neighbouring outputs a plane apart), a window over ``max_window``, two reductions (softmax),
  dynamic shapes, a CPU target;
- its schedules compute what the unscheduled PrimFunc computes (thread loops made serial, run
  with LLVM, the blocks also in reverse);
- the grid follows the hardware profile (warps or wavefronts, ROCm's 256-thread cap);
- the CUDA kernels (sm_90) use no shared memory, write each output once, read the output never,
  and ptxas (when nvcc is present) reports no spills; the MI300X build (gfx942) links.
"""

import re

import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import kernel_resources
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.window_reduction.rule import WindowReduction
from tir_checks import LLVM, assert_schedule_preserves_numerics, compile_func, cuda_source, kernel_body, prim_funcs
from tir_checks import fused_graph as fused

H200 = "nvidia-h200"


# ---- helpers -----------------------------------------------------------------------------------
def token_mixer(bb, x, scale, residual):
    """PoolFormer's block: ``residual + scale * (avg_pool3x3(x) - x)``, padding not counted."""
    pooled = bb.emit(relax.op.nn.avg_pool2d(x, 3, 1, 1, count_include_pad=False))
    mixed = bb.emit(relax.op.multiply(bb.emit(relax.op.subtract(pooled, x)), scale))
    return bb.emit(relax.op.add(residual, mixed))


#: name -> (shape, graph, extra input shapes, window): the pools the rule takes.
TAKEN = {
    "poolformer_mixer": ((2, 16, 14, 14), token_mixer, ((16, 1, 1), (2, 16, 14, 14)), 9),
    "avg_down_2x2_s2": ((2, 8, 14, 14), lambda bb, x: bb.emit(
        relax.op.nn.avg_pool2d(x, 2, 2, ceil_mode=True, count_include_pad=False)), (), 4),
    "max_3x3_s2": ((2, 8, 13, 11), lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1)), (), 9),
    "avg_5x5_prime": ((1, 3, 17, 13), lambda bb, x: bb.emit(relax.op.nn.avg_pool2d(x, 5, 1, 2)), (), 25),
    "column_sum": ((4, 6, 37), lambda bb, x: bb.emit(relax.op.sum(x, axis=1)), (), 6),
}
#: name -> (shape, graph): what it declines.
DECLINED = {
    "row_sum": ((64, 128), lambda bb, x: bb.emit(relax.op.sum(x, axis=1))),
    "global_pool": ((2, 64, 7, 7), lambda bb, x: bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True))),
    "window_9x9": ((1, 8, 32, 32), lambda bb, x: bb.emit(relax.op.nn.avg_pool2d(x, 9, 1, 4))),
    "softmax": ((8, 64), lambda bb, x: bb.emit(relax.op.nn.softmax(x))),
    "tiny": ((1, 1, 4, 4), lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, 3, 1, 1))),
}


@pytest.fixture(scope="module")
def taken():
    """{name: PrimFunc} of the pools the rule takes, fused for the H200."""
    return {name: fused(shape, body, extra=extra) for name, (shape, body, extra, _) in TAKEN.items()}


# ---- what the rule takes -----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TAKEN))
def test_takes_small_windows_with_their_epilogue(taken, h200, name):
    problem, plan = WindowReduction().plan(taken[name], h200)
    assert plan.window == TAKEN[name][3]
    assert problem.epilogue == (name.startswith("avg") or name == "poolformer_mixer")  # the average's divide
    assert plan.threads % 32 == 0
    assert plan.grid.blocks * plan.threads * plan.outputs_per_thread >= problem.outputs
    sch = WindowReduction().apply(taken[name], h200, False)
    blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    assert len(blocks) == 2  # the reduction and its epilogue (or the store) ...
    outermost = {sch.get(sch.get_loops(b)[0]) for b in blocks}
    assert len(outermost) == 1  # ... in one loop nest: the same thread does both


def test_poolformer_mixer_streams(taken, h200):
    """The pool's window load moves with the output; the epilogue's loads are not the window's."""
    problem, _ = WindowReduction().plan(taken["poolformer_mixer"], h200)
    assert (problem.streams, problem.broadcasts) == (1, 0)


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declines(h200, name):
    shape, body = DECLINED[name]
    assert WindowReduction().apply(fused(shape, body), h200, False) is None


def test_declines_dynamic_shapes(h200):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((tvm.tirx.Var("n", "int64"), 8, 14, 14), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.max_pool2d(x, 3, 1, 1)))
        bb.emit_func_output(out)
    (func,) = prim_funcs(fused_module(bb.get(), h200, hw.fusion_pass(h200))).values()
    assert WindowReduction().apply(func, h200, False) is None


def test_declines_cpu_targets(taken):
    assert WindowReduction().apply(taken["max_3x3_s2"], LLVM, False) is None


# ---- semantics on the CPU ------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TAKEN))
def test_schedules_compute_the_same(taken, h200, name):
    assert_schedule_preserves_numerics(taken[name], WindowReduction().apply(taken[name], h200, False),
                                       blocks_reversed=True)


def test_outputs_per_thread_compute_the_same(h200):
    """A large pool gets several outputs a thread (a wave of resident threads still launched)."""
    func = fused((8, 64, 56, 56), TAKEN["poolformer_mixer"][1], extra=((64, 1, 1), (8, 64, 56, 56)))
    _, plan = WindowReduction().plan(func, h200)
    assert plan.outputs_per_thread > 1
    assert plan.grid.blocks * plan.threads >= gpu_limits(h200).resident_threads
    assert_schedule_preserves_numerics(func, WindowReduction().apply(func, h200, False), blocks_reversed=True)


# ---- the grid follows the hardware profile -------------------------------------------------------
@pytest.mark.parametrize("name", [H200, "nvidia-rtx-3060", "amd-mi300x"])
def test_grid_follows_the_profile(name):
    target = hw.target(name)
    limits = gpu_limits(target)
    func = fused(*TAKEN["poolformer_mixer"][:2], target_name=name, extra=TAKEN["poolformer_mixer"][2])
    problem, plan = WindowReduction().plan(func, target)
    assert plan.threads % limits.profile.warp_size == 0
    assert plan.threads <= int(target.attrs["max_num_threads"])
    assert plan.grid.blocks * plan.threads * plan.outputs_per_thread >= problem.outputs
    if target.kind.name == "rocm":
        assert limits.profile.warp_size == 64 and plan.threads <= 256


# ---- the kernels ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["poolformer_mixer", "max_3x3_s2"])
def test_sm90_kernel_keeps_the_window_in_a_register(taken, h200, name):
    sch = WindowReduction().apply(taken[name], h200, False)
    source = cuda_source(compile_func(sch.mod["main"], h200))
    body = kernel_body(source, "k_kernel")
    assert "__shared__" not in body
    output = sch.mod["main"].params[-1].name + "_ptr"  # TVM's name for the output's pointer
    writes = re.findall(rf"{output}\[[^\]]*\] = ", body)
    assert len(writes) == 1, body  # one store an output, after the window
    assert body.count(f"{output}[") == 1  # and never read back
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: checked in the source only")
    (kernel,) = kernel_resources.measure_cuda_source(source, "sm_90")
    assert not kernel.spills, kernel


def test_mi300x_build(taken):
    target = hw.target("amd-mi300x")
    if not toolchain.have_rocm_toolchain():
        pytest.skip("no ROCm toolchain (ld.lld 22, device libraries): run scripts/install-system-deps.sh")
    toolchain.configure_rocm()
    func = fused(*TAKEN["poolformer_mixer"][:2], target_name="amd-mi300x", extra=TAKEN["poolformer_mixer"][2])
    ex = compile_func(WindowReduction().apply(func, target, False).mod["main"], target)
    (kernel,) = kernel_resources.measure(ex, target)
    _, plan = WindowReduction().plan(func, target)
    assert kernel.threads_per_block == plan.threads
