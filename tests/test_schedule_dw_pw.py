"""Tests for schedules/dw_pw/: the DepthwisePointwise rule (depthwise conv + pointwise conv, one kernel).

CPU only except the last test. Checked:
- with the policy knob ``pair_templates`` naming ``depthwise_conv->pointwise_conv`` the fusion pass
  puts the ``dw_pw`` micro-graph's depthwise 3x3 (+BN+ReLU6) and pointwise 1x1 (+bias) in one
  PrimFunc, and MobileNetV2's bottleneck pairs it fuses (4 at batch 1 and 32 on the H200); the rule
  takes exactly those, and declines a depthwise or pointwise conv alone, conv+pool, and CPU targets;
  by default the H200 keeps the pair apart (its cost rule: the fused kernel measured slower there);
- :func:`supports_pair` says the same of the two PrimFuncs before fusion, and :func:`pair_plan`
  gives the tile the rule then picks;
- its schedules compute what the unscheduled PrimFunc computes (thread loops made serial, both run
  with LLVM) for the tiles it picks, synthetic variants (residual add, stride 2, 5x5, dilation,
  no BatchNorm, batch 2, no padding, 7x7 planes) and forced tiles (edge tiles on both axes, output
  channel tiles, several channel passes, register tiles of several pixels and channels);
- tiles respect the H200's, the RTX 3060's and the MI300X's limits (static shared memory, threads,
  registers) and TVM allocates exactly the planned shared memory;
- on sm_90 the group is ONE kernel whose depthwise tile is ``__shared__`` (never in global memory),
  launch-bounded by the planned residency, and ptxas (when nvcc is present) reports no spills for
  the dw_pw pair at batch 1 and 32 and for every kernel of MobileNetV2 built with the knob;
- the fused pair builds for gfx942 (ROCm) without VGPR spills or scratch.
About 80 s with two workers on a busy 2-core machine (MobileNetV2 build for sm_90: 11 s; LLVM runs of
MobileNetV2's four batch-1 pairs: 10-35 s).
"""

import dataclasses
import re

import numpy as np
import pytest
import tvm
from tvm import tirx

import tvm_fusion_hw as hw
import tvm_fusion_hw.schedules as hw_schedules
from tvm_fusion_hw.feedback import kernel_resources
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.models.common import GraphBuilder
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.plans import TemplatePlanners
from tvm_fusion_hw.schedules.base.probe import allocated_shared_bytes
from tvm_fusion_hw.hardware.occupancy import occupancy
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.dw_pw.rule import DepthwisePointwise, pair_plan, supports_pair
from tvm_fusion_hw.schedules.dw_pw.tiles import DwPwProblem, evaluate_tile, rank_tiles
from tir_checks import (LLVM, assert_schedule_preserves_numerics, blocks, cuda_source, kernels_of, prim_funcs,
                        ptxas_kernels, run_model)

H200 = "nvidia-h200"
PAIR = "depthwise_conv->pointwise_conv"
#: The policy knob that turns the pair on (with the default pairs).
KNOB = ("conv->window", "pointwise_conv->window", PAIR)


# ---- helpers -----------------------------------------------------------------------------------
def _weight_kinds(func):
    """Per reduction block of ``func``: the kinds of conv weight it reads, from the shapes alone
    (independent of the rule): "dw" for ``[C, 1, KH, KW]``, "pw" for ``[F, C, 1, 1]``, with C."""
    kinds = []
    for block in blocks(func):
        if not any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars):
            continue
        found = []
        for read in block.reads:
            shape = [int(d) for d in read.source.shape]
            if len(shape) == 4 and shape[1] == 1 and shape[0] > 1 and shape[2] > 1:
                found.append(("dw", shape[0]))
            elif len(shape) == 4 and shape[2:] == [1, 1] and shape[1] > 1:
                found.append(("pw", shape[1]))
        kinds.append(found)
    return kinds


def is_dw_pw_kernel(func):
    """Two reductions: a depthwise conv over C channels, then a pointwise conv over those C."""
    kinds = _weight_kinds(func)
    return len(kinds) == 2 and len(kinds[0]) == len(kinds[1]) == 1 and kinds[0][0][0] == "dw" \
        and kinds[1][0] == ("pw", kinds[0][0][1])


#: The pair judged as these tests were written for it: by the policy's own tile model (the pair's
#: entry a plain check, no plan, no cost rule), which fuses MobileNetV2's four pairs on the H200.
#: The default planners judge it by the template's plan and the profile's roofline
#: (tests/test_fusion_profiles.py).
CHECKED = TemplatePlanners(pairs={**hw_schedules.PAIR_TEMPLATES, PAIR: supports_pair},
                           fused_by_default=KNOB, kernel_plan=hw_schedules.kernel_plan)


def fuse_pass(target, **knobs):
    """The fusion pass with the pair judged by the policy's tile model (:data:`CHECKED`)."""
    return hw.HardwareAwareFuseOps(target, planners=CHECKED, **knobs)


def fused_funcs(model, batch=1, target_name=H200, **knobs):
    target = hw.target(target_name)
    knobs.setdefault("pair_templates", KNOB)
    fuse = fuse_pass(target, **knobs)
    return prim_funcs(fused_module(import_onnx(build(model, batch=batch)), target, fuse))


def dw_pw_model(c=16, cout=8, hw_=14, k=3, stride=1, pad=None, batch=1, bn=True, act=True,
                pw_bn=False, residual=False, dilation=1):
    """depthwise conv (bias) [-> BN] [-> ReLU6] -> pointwise conv (bias) [-> BN] [+ residual]."""
    g = GraphBuilder(0, conv_bias=True)
    x = g.input("input", [batch, c, hw_, hw_])
    pad = (k // 2) * dilation if pad is None else pad
    if dilation == 1:
        y = g.conv(x, c, c, k, stride=stride, pad=pad, group=c, gain=1.0)
    else:
        w = g.normal("dw.weight", (c, 1, k, k), 0.3)
        y = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                 dilations=[dilation] * 2, group=c)
    y = g.bn(y, c) if bn else y
    y = g.relu6(y) if act else y
    y = g.conv(y, c, cout, 1, pad=0)
    y = g.bn(y, cout) if pw_bn else y
    out = (hw_ + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    if residual:
        y = g.add(y, g.input("residual", [batch, cout, out, out]))
    return g.model(y, [batch, cout, out, out], "dw_pw_variant")


def fused_variant(**case):
    """The one PrimFunc of ``dw_pw_model(**case)`` that holds both convs (the pair forced)."""
    target = hw.target(H200)
    fuse = fuse_pass(target, pair_templates=(PAIR,), max_occupancy_drop=0.99)
    funcs = prim_funcs(fused_module(import_onnx(dw_pw_model(**case)), target, fuse))
    pairs = [f for f in funcs.values() if is_dw_pw_kernel(f)]
    assert len(pairs) == 1, list(funcs)
    return pairs[0]


# ---- fixtures (h200: conftest.py) ------------------------------------------------------------
@pytest.fixture(scope="session")
def fused():
    """{(model, batch): {name: PrimFunc}} fused for the H200 with the pair turned on."""
    return {(m, b): fused_funcs(m, b) for m in ("dw_pw", "mobilenet_v2") for b in (1, 32)}


@pytest.fixture(scope="session")
def apart():
    """{model: {name: PrimFunc}} fused for the H200 with no complex pair: the pairs' parts apart."""
    return {m: fused_funcs(m, 1, pair_templates=()) for m in ("dw_pw", "mobilenet_v2")}


# ---- (1) what the rule takes -------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 32])
def test_applies_to_the_fused_dw_pw_group(fused, h200, batch):
    funcs = fused[("dw_pw", batch)]
    rule = DepthwisePointwise()
    taken = [n for n, f in funcs.items() if rule.apply(f, h200, False) is not None]
    assert taken == [n for n, f in funcs.items() if is_dw_pw_kernel(f)] and len(taken) == 1
    problem, tile = rule.plan(funcs[taken[0]], h200)
    assert (problem.batch, problem.channels, problem.out_channels) == (batch, 144, 24)
    assert (problem.height, problem.width, problem.kernel, problem.stride) == (56, 56, (3, 3), (1, 1))
    assert tile.threads % 32 == 0 and tile.threads <= 256 and tile.chunk % tile.channel_threads == 0
    sch = rule.apply(funcs[taken[0]], h200, False)
    assert 0 < allocated_shared_bytes(sch.mod["main"]) <= tile.shared_bytes
    print(f"dw_pw b{batch}: {tile.summary()}")


@pytest.mark.parametrize("batch", [1, 32])
def test_takes_every_mobilenet_pair_and_nothing_else(fused, h200, batch):
    funcs = fused[("mobilenet_v2", batch)]
    pairs = sorted(n for n, f in funcs.items() if is_dw_pw_kernel(f))
    # The policy fuses the bottlenecks' dw->pw pairs without a residual add whose 64-pixel tile of
    # all channels fits its own tile model: 32->16, 96->24, 144->32 and 192->64 channels.
    assert len(pairs) == 4, pairs
    rule = DepthwisePointwise()
    assert sorted(n for n, f in funcs.items() if rule.apply(f, h200, False) is not None) == pairs
    for name in pairs:
        problem, tile = rule.plan(funcs[name], h200)
        print(f"MobileNetV2 b{batch} {problem.channels}->{problem.out_channels} "
              f"{problem.height}x{problem.width} s{problem.stride[0]}: {tile.summary()}")


def test_declines_other_kernels(apart, h200):
    rule = DepthwisePointwise()
    declined = dict(apart["dw_pw"])  # the depthwise conv and the pointwise conv apart
    declined.update({f"mobilenet {n}": f for n, f in apart["mobilenet_v2"].items()})
    declined.update(fused_funcs("conv_relu_pool", pair_templates=("conv->window",)))
    assert any("pool" in n for n in declined)
    for name, func in declined.items():
        assert rule.apply(func, h200, False) is None, name
    assert rule.apply(fused_variant(), LLVM, False) is None


# ---- the policy's view: the check, the plan, the knob ---------------------------------------------
def _parts(funcs):
    """(depthwise PrimFuncs, pointwise PrimFuncs) of an unfused module, by their weights."""
    dws, pws = [], []
    for f in funcs.values():
        kinds = _weight_kinds(f)
        if len(kinds) == 1 and len(kinds[0]) == 1:
            (dws if kinds[0][0][0] == "dw" else pws).append(f)
    return dws, pws


def test_supports_pair_judges_the_unfused_functions(apart):
    (dw,), (pw,) = _parts(apart["dw_pw"])
    assert supports_pair(dw, pw)
    assert not supports_pair(pw, dw) and not supports_pair(dw, dw) and not supports_pair(pw, pw)
    # MobileNetV2: a depthwise conv only pairs with a pointwise conv over its channels and plane.
    dws, pws = _parts(apart["mobilenet_v2"])
    matching = [(d, p) for d in dws for p in pws if supports_pair(d, p)]
    shapes = {(int(d.params[0].ty.shape[1]), int(p.params[-1].ty.shape[1])) for d, p in matching}
    assert (144, 24) in shapes and (960, 160) in shapes and (960, 320) in shapes
    for d, p in matching:  # the depthwise output plane is the pointwise input plane
        assert [int(x) for x in d.params[-1].ty.shape] == [int(x) for x in p.params[0].ty.shape]
    # A regular 3x3 conv or a pool as the consumer, a regular conv as the producer.
    conv_pool = fused_funcs("conv_relu_pool", pair_templates=(), winograd="off")
    (conv,) = [f for n, f in conv_pool.items() if "conv" in n]
    (pool,) = [f for n, f in conv_pool.items() if "pool" in n]
    assert not supports_pair(dw, conv) and not supports_pair(dw, pool) and not supports_pair(conv, pw)


def test_pair_plan_is_the_rules_tile(apart, fused, h200):
    (dw,), (pw,) = _parts(apart["dw_pw"])
    (func,) = [f for f in fused[("dw_pw", 1)].values() if is_dw_pw_kernel(f)]
    _, tile = DepthwisePointwise().plan(func, h200)
    assert pair_plan(dw, pw, h200) == tile
    assert pair_plan(dw, pw, LLVM) is None and pair_plan(pw, dw, h200) is None


def test_pair_is_fused_on_the_h200_only_without_its_cost_rule(fused, apart):
    """A default pair, which the H200 keeps apart by its cost rule (tests/test_fusion_profiles.py
    has the profiles that fuse it); judged by the policy's tile model it fuses there."""
    assert PAIR in hw_schedules.PAIR_TEMPLATES and PAIR in hw_schedules.FUSED_PAIR_TEMPLATES
    assert isinstance(hw_schedules.default_rules()[0], DepthwisePointwise)
    target = hw.target(H200)
    default = prim_funcs(fused_module(import_onnx(build("dw_pw")), target, hw.fusion_pass(target)))
    assert not any(map(is_dw_pw_kernel, default.values()))
    assert not any(map(is_dw_pw_kernel, apart["dw_pw"].values()))
    assert sum(map(is_dw_pw_kernel, fused[("dw_pw", 1)].values())) == 1


# ---- (2) numerics on the CPU ---------------------------------------------------------------------
@pytest.mark.parametrize("model", ["dw_pw", "mobilenet_v2"])
def test_batch1_schedules_compute_the_same(fused, h200, model):
    rule = DepthwisePointwise()
    for f in fused[(model, 1)].values():
        if is_dw_pw_kernel(f):
            assert_schedule_preserves_numerics(f, rule.apply(f, h200, False))


@pytest.mark.parametrize("case", [
    dict(residual=True, pw_bn=True, cout=16),  # BatchNorm and a residual add after the pointwise conv
    dict(stride=2, hw_=15),
    dict(k=5, hw_=12),
    dict(dilation=2, hw_=13),
    dict(bn=False, act=False),  # the depthwise conv's bias alone
    dict(batch=2, c=24, cout=12, hw_=9),
    dict(pad=0, hw_=14),  # no padding block: the rule stages a copy of the input
    dict(c=40, cout=24, hw_=7),
])
def test_synthetic_variants_compute_the_same(h200, case):
    func = fused_variant(**case)
    rule = DepthwisePointwise()
    problem, _ = rule.plan(func, h200)
    assert problem.tail_tensors == (1 if case.get("residual") else 0)
    assert_schedule_preserves_numerics(func, rule.apply(func, h200, False))


@pytest.mark.parametrize("shape,chunk", [
    ((4, 8, 2, 16, 4, 2), 8),  # 4x8 pixels on a 15x15 plane: edge tiles on both axes; 2 passes
    ((3, 8, 3, 8, 2, 4), 4),  # edge tiles along W; 4 passes; 3 pixels x 2 channels a thread
    ((4, 4, 2, 8, 1, 4), 16),  # 4 of 8 output channels a block: two channel tiles, one pass
    ((15, 15, 15, 15, 8, 1), 16),  # the whole plane, 15 pixels x 8 channels a thread
])
def test_forced_tiles_compute_the_same(h200, shape, chunk):
    func = fused_variant(c=16, cout=8, hw_=15)
    rule = DepthwisePointwise()
    problem, _ = rule.plan(func, h200)
    config = dataclasses.replace(rule.get_config(h200), min_threads=8, max_accumulators=128,
                                 max_registers=255)
    # A forced tile is costed under relaxed bounds; the warp multiple is the hardware's own.
    limits = gpu_limits(h200)
    limits = dataclasses.replace(limits, profile=dataclasses.replace(limits.profile, warp_size=1))
    tile = evaluate_tile(problem, limits, config, shape, chunk)
    assert tile is not None
    sch = rule.schedule_tile(func, h200, tile)
    assert sch is not None
    assert_schedule_preserves_numerics(func, sch)


# ---- tiles within each target's limits -----------------------------------------------------------
@pytest.mark.parametrize("name", ["nvidia-h200", "nvidia-rtx-3060", "amd-mi300x"])
def test_tiles_respect_target_limits(fused, name):
    target = hw.target(name)
    limits = gpu_limits(target)
    rule = DepthwisePointwise()
    config = rule.get_config(target)
    funcs = [f for key in (("dw_pw", 32), ("mobilenet_v2", 32)) for f in fused[key].values()
             if is_dw_pw_kernel(f)]
    assert len(funcs) == 5
    for f in funcs:
        problem, tile = rule.plan(f, target)
        for t in [tile] + rank_tiles(problem, limits, config)[:20]:
            assert t.threads % limits.profile.warp_size == 0
            assert t.threads <= min(limits.profile.max_threads_per_block, config.max_threads, 256)
            assert t.shared_bytes <= limits.shared_memory_bytes_per_block
            if target.kind.name == "cuda":
                assert t.shared_bytes <= 48 * 1024  # static __shared__
            assert t.registers_estimate <= min(config.max_registers, limits.profile.max_registers_per_thread)
            assert t.blocks_per_multiprocessor >= 1
            assert t.registers_estimate * t.threads * t.blocks_per_multiprocessor <= \
                limits.profile.registers_per_multiprocessor
        sch = rule.apply(f, target, False)
        assert 0 < allocated_shared_bytes(sch.mod["main"]) <= tile.shared_bytes


@pytest.mark.parametrize("name", hw.known_profiles())
def test_tile_occupancy_is_the_vendor_method(name):
    """Blocks per SM of every ranked tile (its launch bounds) are hardware.occupancy's."""
    target = hw.target(name)
    problem = DwPwProblem(1, 32, 16, 28, 28, (3, 3), (1, 1), (1, 1), 4, 0, 1, 0, 1)
    tiles = rank_tiles(problem, gpu_limits(target), DepthwisePointwise().get_config(target))
    assert tiles
    for tile in tiles:
        expected = occupancy(hw.load_profile(name), tile.threads, tile.registers_estimate, tile.shared_bytes)
        assert tile.blocks_per_multiprocessor == expected.blocks_per_multiprocessor, tile


# ---- (3) CUDA: one kernel, the depthwise tile in shared memory, no spills ------------------------
@pytest.fixture(scope="module")
def sm90_dw_pw():
    """{batch: executable} of dw_pw built for the H200 with the pair on."""
    target = hw.target(H200)
    out = {}
    for batch in (1, 32):
        mod = import_onnx(build("dw_pw", batch=batch), keep_params_in_input=True)
        out[batch] = tvm.compile(mod, target=target,
                                 relax_pipeline=hw.get_pipeline(target, fuse_pass=fuse_pass(target, pair_templates=KNOB)))
    return out


@pytest.mark.parametrize("batch", [1, 32])
def test_sm90_one_kernel_with_shared_tile_and_no_spills(sm90_dw_pw, fused, h200, batch):
    (name,) = [n for n, f in fused[("dw_pw", batch)].items() if is_dw_pw_kernel(f)]
    _, tile = DepthwisePointwise().plan(fused[("dw_pw", batch)][name], h200)
    source = cuda_source(sm90_dw_pw[batch])
    ours = kernels_of(source, name)
    assert list(ours) == [f"{name}_kernel"]
    body = ours[f"{name}_kernel"]
    # The depthwise outputs of a chunk: a __shared__ array of chunk x pixels, no global workspace.
    assert re.search(rf"__shared__ alignas\(\d+\) float \w+\[{tile.chunk * tile.pixels}\];", body)
    assert "__syncthreads()" in body
    assert f"__launch_bounds__({tile.threads}, {tile.blocks_per_multiprocessor}) {name}_kernel" in source
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: one kernel and shared memory checked in the source only")
    kernel = ptxas_kernels(source)[f"{name}_kernel"]
    print(f"dw_pw b{batch}: {kernel.registers} registers (estimated {tile.registers_estimate}), "
          f"{kernel.static_shared_bytes} B smem, {tile.threads} threads x {tile.blocks} blocks")
    assert kernel.spill_store_bytes == kernel.spill_load_bytes == 0
    assert kernel.static_shared_bytes == tile.shared_bytes
    # The launch bound holds the registers to the planned residency.
    assert kernel.registers * tile.threads * tile.blocks_per_multiprocessor <= 65536


@pytest.fixture(scope="module")
def sm90_mobilenet():
    target = hw.target(H200)
    mod = import_onnx(build("mobilenet_v2", batch=1), keep_params_in_input=True)
    return tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target, fuse_pass=fuse_pass(target, pair_templates=KNOB)))


def test_mobilenet_builds_for_sm90_with_the_pair_on(sm90_mobilenet, fused):
    source = cuda_source(sm90_mobilenet)
    pairs = [n for n, f in fused[("mobilenet_v2", 1)].items() if is_dw_pw_kernel(f)]
    for name in pairs:
        kernels = kernels_of(source, name)
        assert list(kernels) == [f"{name}_kernel"], name
        assert "__shared__" in kernels[f"{name}_kernel"], name
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    report = ptxas_kernels(source)
    assert not [k for k, kr in report.items() if kr.spill_store_bytes or kr.spill_load_bytes]
    for name in pairs:
        print(f"{name}: {report[f'{name}_kernel']}")


def test_mobilenet_batch32_pairs_have_no_spills(fused, h200):
    """The batch-32 pair kernels alone: their register tiles are the largest."""
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    rule = DepthwisePointwise()
    kernels = {}
    for name, f in fused[("mobilenet_v2", 32)].items():
        if is_dw_pw_kernel(f):
            kernels[name] = rule.apply(f, h200, False).mod["main"].with_attr("global_symbol", name)
    report = ptxas_kernels(cuda_source(tvm.compile(tvm.IRModule(kernels), target=h200)))
    for name in kernels:
        kernel = report[f"{name}_kernel"]
        assert kernel.spill_store_bytes == kernel.spill_load_bytes == 0, (name, kernel.registers)


# ---- (4) ROCm: gfx942 --------------------------------------------------------------------------
def test_builds_for_gfx942(fused):
    if not toolchain.have_rocm_toolchain():
        pytest.skip("no ROCm toolchain (ld.lld 22, device libraries)")
    toolchain.configure_rocm()
    target = hw.target("amd-mi300x")
    # The whole micro-graph through the pipeline: the policy's own tile model (128 pixels of all
    # channels) refuses the pair on 64 KiB of LDS, so its knobs make room.
    mod = import_onnx(build("dw_pw", batch=1), keep_params_in_input=True)
    pipeline = hw.get_pipeline(target, fuse_pass=fuse_pass(target, pair_templates=KNOB, tile_warps=1,
                                                           max_occupancy_drop=0.99))
    measured = kernel_resources.measure(tvm.compile(mod, target=target, relax_pipeline=pipeline), target)
    # ... and MobileNetV2's batch-32 pairs (fused for the H200) scheduled for gfx942.
    rule = DepthwisePointwise()
    kernels = {n: rule.apply(f, target, False).mod["main"].with_attr("global_symbol", n)
               for n, f in fused[("mobilenet_v2", 32)].items() if is_dw_pw_kernel(f)}
    measured += kernel_resources.measure(tvm.compile(tvm.IRModule(kernels), target=target), target)
    pairs = [k for k in measured if k.name.count("conv2d") >= 2]
    assert len(pairs) == 5
    for k in pairs:
        print(f"{k.name}: {k.registers} VGPRs, {k.scalar_registers} SGPRs, {k.static_shared_bytes} B LDS")
        # SGPR spills go to VGPR lanes; VGPR spills or scratch would go to memory.
        assert k.spill_store_bytes == 0 and k.stack_frame_bytes == 0
        assert k.static_shared_bytes > 0 and (k.max_threads_per_block or 256) <= 256


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("model,batch", [("dw_pw", 1), ("dw_pw", 32), ("mobilenet_v2", 1),
                                         ("mobilenet_v2", 32)])
def test_on_gpu_matches_the_pair_apart(model, batch):
    target, dev = hw.target(H200), tvm.cuda(0)
    outs, times = {}, {}
    for name, knob in (("apart", None), ("fused", KNOB)):
        outs[name], vm, args = run_model(model, batch, target, hw.get_pipeline(target, fuse_pass=fuse_pass(target, pair_templates=knob)), dev)
        times[name] = vm.time_evaluator("main", dev, number=20, repeat=5)(*args).median * 1e3
    print(f"{model} b{batch}: pair apart {times['apart']:.3f} ms, DepthwisePointwise {times['fused']:.3f} ms")
    np.testing.assert_allclose(outs["fused"], outs["apart"], rtol=1e-4, atol=1e-4)
