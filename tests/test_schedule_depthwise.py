"""Tests for schedules/depthwise/: the DepthwiseConv schedule rule.

CPU only except the last test. Checked:
- the rule takes every depthwise-conv kernel of MobileNetV2 (batch 1 and 32, our fusion and stock
  FuseOps) and synthetic variants (odd sizes, stride 2, 5x5, dilation 2, no padding, ReLU6), and
  declines regular, pointwise and grouped convs, a channel multiplier, matmuls, element-wise
  kernels and pools;
- its schedules compute what the unscheduled PrimFunc computes: the thread loops are turned back
  into serial loops and both are run with LLVM (TVM's primitives preserve semantics, this checks
  the rule used them on the right blocks);
- tiles respect the target: threads a multiple of the warp, shared memory as planned and within a
  block's static limit, on the H200, A100, MI300X and a CUDA target with no profile;
- the dw_pw micro-graph and MobileNetV2 build for sm_80, sm_90 and gfx942 with the rule first;
- the CUDA kernels stage their input in ``__shared__`` memory and ptxas (when nvcc is present)
  reports no spills on sm_90;
- on a CUDA GPU (marked ``gpu``): MobileNetV2 with and without the rule gives the same outputs.
About 50 s on 2 cores (MobileNetV2 builds: 9 s for sm_90, 16 s for gfx942; nvcc 7 s).
"""

import time

import numpy as np
import pytest
import tvm
from tvm import tirx
from tvm.s_tir import dlight as dl

import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.models import build
from tvm_fusion_hw.models.common import GraphBuilder
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.probe import allocated_shared_bytes
from tvm_fusion_hw.hardware.occupancy import occupancy
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.depthwise.rule import DepthwiseConv
from tvm_fusion_hw.schedules.depthwise.tiles import DepthwiseProblem, rank_tiles
from tir_checks import (LLVM, assert_schedule_preserves_numerics, blocks, compile_func, cuda_source, kernel_body, prim_funcs,
                        ptxas_kernels, run_model)

H200 = "nvidia-h200"
STOCK_RULES = (dl.gpu.Matmul, dl.gpu.GEMV, dl.gpu.Reduction, dl.gpu.GeneralReduction, dl.gpu.Fallback)


# ---- helpers -----------------------------------------------------------------------------------
def fuse(mod, target, ours=True):
    """``fused_module`` with our fusion (or stock FuseOps): one PrimFunc per kernel."""
    return fused_module(mod, target, hw.fusion_pass(target) if ours else None)


def pipeline(target, rule=True):
    """``get_pipeline`` with DepthwiseConv alone before dlight's rules (or dlight's rules only)."""
    return hw.get_pipeline(target, schedules=[DepthwiseConv()] if rule else False)


def is_depthwise_kernel(func):
    """Independent of the rule: one reduction block, which reads a [C, 1, KH, KW] weight for C
    output channels (a conv with one input channel per group, groups = C)."""
    reductions = [
        b for b in blocks(func) if any(iv.iter_type == tirx.IterVar.CommReduce for iv in b.iter_vars)
    ]
    if len(reductions) != 1:
        return False
    block = reductions[0]
    if len(block.writes) != 1 or len(block.writes[0].source.shape) != 4:
        return False
    out_channels = int(block.writes[0].source.shape[1])
    for read in block.reads:
        shape = [int(d) for d in read.source.shape]
        if len(shape) == 4 and shape[0] == out_channels > 1 and shape[1] == 1 and shape[2] > 1:
            return True
    return False


def assert_rule_preserves_numerics(func, target, seed=0):
    assert_schedule_preserves_numerics(func, DepthwiseConv().apply(func, target, False), seed)


def synthetic(c, hw_, k=3, stride=1, pad=None, dilation=1, group=None, cout=None, relu6=True):
    """A one-conv ONNX graph (bias, optional ReLU6) fused with stock FuseOps: its conv kernel."""
    g = GraphBuilder(0, conv_bias=True)
    x = g.input("input", [1, c, hw_, hw_])
    group, cout = group or c, cout or c
    pad = (k // 2) * dilation if pad is None else pad
    if dilation == 1:
        y = g.conv(x, c, cout, k, stride=stride, pad=pad, group=group)
    else:
        w = g.normal("w", (cout, c // group, k, k), 0.3)
        y = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                 pads=[pad] * 4, dilations=[dilation, dilation], group=group)
    if relu6:
        y = g.relu6(y)
    out = (hw_ + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    model = g.model(y, [1, cout, out, out], "synthetic")
    fused = fuse(import_onnx(model, keep_params_in_input=True), hw.target(H200), ours=False)
    convs = [f for f in prim_funcs(fused).values()
             if any(b.name_hint.startswith(("group_conv", "conv", "depthwise")) for b in blocks(f))]
    assert len(convs) == 1
    return convs[0]


# ---- fixtures (h200: conftest.py) ------------------------------------------------------------
@pytest.fixture(scope="session")
def mobilenet_fused(h200):
    """{(batch, fusion): {name: PrimFunc}} for MobileNetV2, fused for the H200."""
    out = {}
    for batch in (1, 32):
        mod = import_onnx(build("mobilenet_v2", batch=batch), keep_params_in_input=True)
        out[(batch, "ours")] = prim_funcs(fuse(mod, h200, ours=True))
        if batch == 1:
            out[(batch, "stock")] = prim_funcs(fuse(mod, h200, ours=False))
    return out


@pytest.fixture(scope="session")
def mobilenet_b1_sm90():
    target = hw.target(H200)
    mod = import_onnx(build("mobilenet_v2", batch=1), keep_params_in_input=True)
    start = time.time()
    ex = tvm.compile(mod, target=target, relax_pipeline=pipeline(target))
    return ex, time.time() - start


# ---- (1) what the rule takes -------------------------------------------------------------------
@pytest.mark.parametrize("key", [(1, "ours"), (32, "ours"), (1, "stock")])
def test_applies_to_every_depthwise_kernel_and_nothing_else(mobilenet_fused, h200, key):
    funcs = mobilenet_fused[key]
    depthwise = sorted(n for n, f in funcs.items() if is_depthwise_kernel(f))
    # MobileNetV2's 17 depthwise convs have 10 distinct shapes (FuseTIR dedups the rest), and
    # either fusion keeps each in a kernel of its own (no dw->pw pair by default).
    assert len(depthwise) == 10, depthwise
    rule = DepthwiseConv()
    taken = sorted(n for n, f in funcs.items() if rule.apply(f, h200, False) is not None)
    assert taken == depthwise


def test_declines_other_kernels_by_kind(mobilenet_fused, h200):
    funcs = mobilenet_fused[(1, "stock")]
    rule = DepthwiseConv()

    def weight_shapes(f):
        return [[int(d) for d in p.ty.shape] for p in f.params if len(p.ty.shape) == 4][1:2]

    regular = [f for f in funcs.values() if [[32, 3, 3, 3]] == weight_shapes(f)]
    pointwise = [f for f in funcs.values()
                 if weight_shapes(f) and weight_shapes(f)[0][2:] == [1, 1] and weight_shapes(f)[0][1] > 1]
    others = {
        "regular conv": regular,
        "pointwise conv": pointwise,
        "matmul": [f for n, f in funcs.items() if "matmul" in n],
        "pool (mean)": [f for n, f in funcs.items() if n.endswith("mean")],
        "element-wise": [f for n, f in funcs.items() if "batch_norm" in n and "conv" not in n],
    }
    for kind, kernels in others.items():
        assert kernels, kind
        for f in kernels:
            assert rule.apply(f, h200, False) is None, kind


@pytest.mark.parametrize("case", [
    dict(group=12, c=24, hw_=14),  # grouped conv, 2 input channels per group
    dict(group=8, c=8, cout=16, hw_=14),  # channel multiplier 2
])
def test_declines_non_depthwise_synthetic(h200, case):
    assert DepthwiseConv().apply(synthetic(**case), h200, False) is None


def test_declines_max_pool_and_non_gpu_targets(h200):
    g = GraphBuilder(0)
    x = g.input("input", [1, 8, 16, 16])
    model = g.model(g.maxpool(x, 3, 2, 1), [1, 8, 8, 8], "pool")
    funcs = prim_funcs(fuse(import_onnx(model), h200, ours=False))
    assert funcs and all(DepthwiseConv().apply(f, h200, False) is None for f in funcs.values())
    dw = synthetic(c=8, hw_=16)
    assert DepthwiseConv().apply(dw, LLVM, False) is None


# ---- (4) semantics of the schedule on the CPU ----------------------------------------------------
def test_mobilenet_schedules_compute_the_same(mobilenet_fused, h200):
    funcs = mobilenet_fused[(1, "ours")]
    for name, f in funcs.items():
        if is_depthwise_kernel(f):
            assert_rule_preserves_numerics(f, h200)


@pytest.mark.parametrize("case", [
    dict(c=24, hw_=15),  # odd plane: edge tiles on rows and columns
    dict(c=16, hw_=15, stride=2),
    dict(c=8, hw_=20, k=5),  # EfficientNet's 5x5
    dict(c=8, hw_=12, pad=0),  # no padding block: the rule stages a copy of the input
    dict(c=8, hw_=16, dilation=2),
    dict(c=40, hw_=7, relu6=False),  # several channels per block
    dict(c=8, hw_=14, k=1),  # a 1x1 window is still a depthwise conv (a per-channel scale)
    dict(c=12, hw_=14, k=7, relu6=False),  # ConvNeXt's 7x7 with its bias
])
def test_synthetic_variants(h200, case):
    assert_rule_preserves_numerics(synthetic(**case), h200)


def test_seven_by_seven_windows_have_tiles(h200):
    """49 weights a thread in registers: tiles exist at a lower residency (they did not at one
    half of the SM's threads, and ConvNeXt's depthwise convs fell to dlight), and ptxas agrees
    that they do not spill."""
    func = synthetic(c=96, hw_=56, k=7, relu6=False)
    with h200:
        problem, tile = DepthwiseConv().plan(func, h200)
    assert problem.kernel == (7, 7) and tile.registers_estimate > 64
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    kernel = next(iter(ptxas_kernels(cuda_source(compile_func(DepthwiseConv().apply(func, h200, False).mod["main"],
                                                               h200))).values()))
    assert kernel.spill_store_bytes == kernel.spill_load_bytes == 0
    assert kernel.registers <= tile.registers_estimate * 1.3


# ---- tiles within each target's limits -----------------------------------------------------------
@pytest.mark.parametrize("name", ["nvidia-h200", "nvidia-a100-80gb", "amd-mi300x", "plain-cuda"])
def test_tiles_respect_target_limits(mobilenet_fused, name):
    if name == "plain-cuda":
        target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    else:
        target = hw.target(name)
    limits = gpu_limits(target)
    assert limits.from_profile == (name != "plain-cuda")
    assert limits.profile.name == ("cuda-fallback" if name == "plain-cuda" else name)
    rule = DepthwiseConv()
    for f in mobilenet_fused[(32, "ours")].values():
        planned = rule.plan(f, target)
        if planned is None:
            continue
        _, tile = planned
        assert tile.threads % limits.profile.warp_size == 0
        assert tile.threads <= min(limits.profile.max_threads_per_block, rule.get_config(target).max_threads)
        assert tile.shared_bytes <= limits.shared_memory_bytes_per_block
        sch = rule.apply(f, target, False)
        assert 0 < allocated_shared_bytes(sch.mod["main"]) <= tile.shared_bytes


@pytest.mark.parametrize("name", hw.known_profiles())
def test_tile_occupancy_is_the_vendor_method(name):
    """Blocks per SM of every ranked tile are hardware.occupancy's (cuda_occupancy.h, HIP), and
    so is the occupancy the memory time is divided by."""
    target = hw.target(name)
    limits, config = gpu_limits(target), DepthwiseConv().get_config(target)
    for problem in (DepthwiseProblem(1, 32, 56, 56, (3, 3), (1, 1), (1, 1), 4, 0, 1),
                    DepthwiseProblem(32, 96, 14, 14, (3, 3), (2, 2), (1, 1), 4, 0, 1)):
        tiles = rank_tiles(problem, limits, config)
        assert tiles
        for tile in tiles:
            expected = occupancy(hw.load_profile(name), tile.threads, tile.registers_estimate, tile.shared_bytes)
            assert tile.blocks_per_multiprocessor == expected.blocks_per_multiprocessor, tile


# ---- (2) builds ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["nvidia-h200", "nvidia-a100-80gb", "amd-mi300x"])
def test_dw_pw_builds(name):
    target = hw.target(name)
    mod = import_onnx(build("dw_pw", batch=1), keep_params_in_input=True)
    ex = tvm.compile(mod, target=target, relax_pipeline=pipeline(target))
    assert ex is not None
    # The fusion policy may put the depthwise conv in one kernel with the pointwise conv (two
    # reductions: not this rule's); where it stands alone, the rule has staged it in shared memory.
    if target.kind.name == "cuda" and any(map(is_depthwise_kernel, prim_funcs(fuse(mod, target)).values())):
        assert "__shared__" in cuda_source(ex)


def test_mobilenet_builds_for_gfx942():
    target = hw.target("amd-mi300x")
    mod = import_onnx(build("mobilenet_v2", batch=1), keep_params_in_input=True)
    assert tvm.compile(mod, target=target, relax_pipeline=pipeline(target)) is not None


# ---- (3) the CUDA kernels: shared memory, no spills ----------------------------------------------
def test_mobilenet_sm90_kernels_use_shared_memory_without_spills(mobilenet_b1_sm90, mobilenet_fused):
    ex, seconds = mobilenet_b1_sm90
    source = cuda_source(ex)
    depthwise = [n for n, f in mobilenet_fused[(1, "ours")].items() if is_depthwise_kernel(f)]
    assert depthwise
    for name in depthwise:
        kernel = kernel_body(source, f"{name}_kernel")
        assert "__shared__" in kernel and "__syncthreads()" in kernel, name
    print(f"MobileNetV2 b1 sm_90 build: {seconds:.1f} s")
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: shared memory checked in the source only")
    report = ptxas_kernels(source)
    for name in depthwise:
        kernel = report[f"{name}_kernel"]
        print(f"{name}: {kernel.registers} registers, {kernel.static_shared_bytes} B smem, "
              f"spills {kernel.spill_store_bytes}/{kernel.spill_load_bytes}")
        assert kernel.spill_store_bytes == 0 and kernel.spill_load_bytes == 0, name
        assert kernel.static_shared_bytes > 0, name


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_mobilenet_on_gpu_matches_without_the_rule():
    target, dev = hw.target(H200), tvm.cuda(0)
    outs = {}
    for rule in (True, False):
        outs[rule], vm, args = run_model("mobilenet_v2", 1, target, pipeline(target, rule=rule), dev)
        timer = vm.time_evaluator("main", dev, number=20, repeat=3)
        print(f"MobileNetV2 b1, depthwise rule {'on' if rule else 'off'}: "
              f"{timer(*args).median * 1e3:.3f} ms")
    np.testing.assert_allclose(outs[True], outs[False], rtol=1e-4, atol=1e-4)

    # Kernel time of each depthwise kernel alone, rule vs dlight's defaults (printed only).
    mod = import_onnx(build("mobilenet_v2", batch=1), keep_params_in_input=True)
    fused = prim_funcs(fuse(mod, target))
    for name, f in fused.items():
        if not is_depthwise_kernel(f):
            continue
        times = []
        for rules in ([DepthwiseConv()], [r() for r in STOCK_RULES]):
            sch = next(s for s in (r.apply(f, target, False) for r in rules) if s is not None)
            kmod = tvm.IRModule({name: sch.mod["main"].with_attr("global_symbol", name)})
            kernel = tvm.compile(kmod, target=target)
            shapes = [[int(d) for d in p.ty.shape] for p in f.params]
            targs = [tvm.runtime.tensor(np.random.rand(*s).astype("float32"), dev) for s in shapes]
            times.append(kernel.mod.time_evaluator(name, dev, number=50)(*targs).mean * 1e6)
        print(f"{name}: {times[0]:.1f} us with the rule, {times[1]:.1f} us with dlight")
