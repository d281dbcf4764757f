"""Tests for schedules/conv_pool/: the ConvPool rule (conv + epilogue + pool in one kernel).

CPU only except the last test. Checked:
- the rule takes the fused conv+bias+ReLU+max-pool PrimFunc of ``conv_relu_pool`` (batch 1 and 32)
  and synthetic variants (avg pool, odd planes with floor pooling, 3x3/3 windows, 1x1 and 5x5
  convs, stride 2, no padding, ReLU6, batch 2, overlapping 3x3/2 pools, after a 7x7/2 conv too, in
  ceil mode, padded as after a ResNet stem), and declines a conv without a pool, a pool alone, a
  depthwise conv (alone and fused with its pool), a padded pool after an epilogue that reads
  another tensor per pixel, a conv kernel over its limit, matmuls,
  element-wise kernels, depthwise+pointwise pairs and non-GPU targets; ``supports_pair`` says the
  same of the conv and pool PrimFuncs before fusion, and ``pair_plan`` (what the fusion policy
  asks) gives the tile the rule then plans for the fused PrimFunc;
- its schedules compute what the unscheduled PrimFunc computes: the thread loops are turned back
  into serial loops and both are run with LLVM, for the tiles it picks and for forced tiles that
  exercise the register tile, the chunked channel loop, the padded row pitch and edge tiles;
- tiles respect each target's limits (H200, A100, MI300X, a CUDA target without a profile);
- the tile model's shortcuts: its bank-conflict simulation (``shared_banks``) equals a brute-force
  count of distinct words per bank at every pitch, and ``rank_tiles`` keeps a ranking (each caller
  gets its own list) until ``conv_pool_tiles.clear_caches``, which empties every cache of the tile
  model and of ``shared_banks``;
- ``conv_relu_pool`` builds for sm_80, sm_90 and gfx942 through ``get_pipeline`` with the rule in
  front; on sm_90 the fused group is ONE kernel (dlight alone makes two) that stages its operands in
  ``__shared__`` memory, and ptxas (when nvcc is present) reports no spills at batch 1 and 32;
- on a CUDA GPU (marked ``gpu``): the same outputs as stock TVM, times printed.
About 13 s with two workers (20 s in one process), nvcc included.
"""

import collections
import dataclasses
import itertools
import random

import numpy as np
import pytest
import tvm

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import kernel_resources
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.models.common import GraphBuilder
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.probe import allocated_shared_bytes
from tvm_fusion_hw.hardware.occupancy import occupancy
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.base.ranking_cache import RememberedRanking
from tvm_fusion_hw.schedules.conv_pool.rule import ConvPool, pair_plan, supports_pair
from tvm_fusion_hw.schedules.conv_pool import tiles as conv_pool_tiles, shared_banks
from tvm_fusion_hw.schedules.conv_pool.pool_padding import unpad_pool
from tvm_fusion_hw.schedules.conv_pool.tiles import ConvPoolProblem, evaluate_tile, rank_tiles
from tvm_fusion_hw.schedules.depthwise.rule import DepthwiseConv
from tvm_fusion_hw.plans import KernelPlan
from tir_checks import (LLVM, assert_schedule_preserves_numerics, compile_func, cuda_source, fused_funcs, kernels_of,
                        prim_funcs, ptxas_kernels, run_model)

H200 = "nvidia-h200"
FUSED = "fused_conv2d_add_relu_max_pool2d"
#: Our fusion with the conv+pool pair allowed; the looser occupancy limit lets the policy accept
#: the pair on every profile whatever ConvPool's plan holds against the unfused conv's (the
#: policy's own decisions are tested in test_policy.py), the cost rule off lets it fuse a pair
#: that ConvPool's calibrated time says runs faster apart, and the small channel tile lets its
#: shared-memory tile model accept a pair that has no plan (a depthwise conv and its pool).
PAIR_KNOBS = dict(pair_templates=("conv->window", "pointwise_conv->window"), pool_channel_tile=8,
                  max_occupancy_drop=0.9, pair_cost=False, winograd="off")
#: The same for conv_relu_pool: this file tests the template, so the pair is fused whatever the
#: policy makes of the plan's occupancy and time against the unfused conv's (ImplicitGemm's plan).
#: Both keep the conv direct: the Winograd rewrite (tests/test_winograd.py) takes a 3x3 conv at batch
#: 32 on the H200 before fusion, and then there is no conv -> pool pair.
CONV_POOL_KNOBS = {"pair_templates": ("conv->window",), "max_occupancy_drop": 0.99, "pair_cost": False,
                   "winograd": "off"}


# ---- helpers -----------------------------------------------------------------------------------
def conv_relu_pool_funcs(batch, target_name=H200):
    target = hw.target(target_name)
    fuse = hw.fusion_pass(target, **CONV_POOL_KNOBS)
    return prim_funcs(fused_module(import_onnx(build("conv_relu_pool", batch=batch)), target, fuse))


def conv_pool_model(cin=8, cout=8, hw_=16, k=3, pad=1, stride=1, pool="max", pk=2, ps=None,
                    act="relu", batch=1, group=1, ceil=0, ppad=0):
    """conv (bias) -> activation -> pool as ONNX."""
    ps = ps or pk
    g = GraphBuilder(0)
    x = g.input("input", [batch, cin, hw_, hw_])
    y = g.conv(x, cin, cout, k, stride=stride, pad=pad, group=group, bias=True, gain=1.0)
    y = {"relu": g.relu, "relu6": g.relu6, None: lambda v: v}[act](y)
    op = {"max": "MaxPool", "avg": "AveragePool"}[pool]
    y = g.op(op, [y], kernel_shape=[pk, pk], strides=[ps, ps], pads=[ppad] * 4, ceil_mode=ceil)
    conv_out = (hw_ + 2 * pad - k) // stride + 1 + 2 * ppad
    pooled = -(-(conv_out - pk) // ps) + 1 if ceil else (conv_out - pk) // ps + 1
    return g.model(y, [batch, cout, pooled, pooled], "conv_pool")


def fused_pool_func(target_name=H200, knobs=None, **case):
    """The one PrimFunc of ``conv_pool_model(**case)`` our fusion makes with a pool in it."""
    target = hw.target(target_name)
    fuse = hw.fusion_pass(target, **(knobs or PAIR_KNOBS))
    funcs = prim_funcs(fused_module(import_onnx(conv_pool_model(**case)), target, fuse))
    pools = [f for n, f in funcs.items() if "pool" in n]
    assert len(pools) == 1, list(funcs)
    return pools[0]


def pipeline(target, monkeypatch, rule=True, knobs=None):
    """``get_pipeline`` with ConvPool (and DepthwiseConv) as the package's rules."""
    rules = [ConvPool(), DepthwiseConv()] if rule else []
    knobs = knobs or CONV_POOL_KNOBS
    return hw.get_pipeline(target, fuse_pass=hw.fusion_pass(target, **knobs), schedules=rules)


def compile_conv_relu_pool(target, monkeypatch, batch=1, rule=True, knobs=None):
    mod = import_onnx(build("conv_relu_pool", batch=batch), keep_params_in_input=True)
    relax_pipeline = pipeline(target, monkeypatch, rule, knobs)
    return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)


# ---- (1) what the rule takes -------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 32])
def test_applies_to_conv_relu_pool(batch):
    target = hw.target(H200)
    funcs = conv_relu_pool_funcs(batch)
    rule = ConvPool()
    assert [n for n, f in funcs.items() if rule.apply(f, target, False) is not None] == [FUSED]
    problem, tile = rule.plan(funcs[FUSED], target)
    assert (problem.batch, problem.in_channels, problem.out_channels) == (batch, 64, 64)
    assert (problem.pooled, problem.kernel, problem.window) == ((56, 56), (3, 3), (2, 2))
    assert problem.pool == "max"
    limits = gpu_limits(target)
    assert tile.threads % limits.profile.warp_size == 0 and tile.threads <= 256
    sch = rule.apply(funcs[FUSED], target, False)
    assert 0 < allocated_shared_bytes(sch.mod["main"]) <= tile.shared_bytes
    print(f"b{batch}: {tile}")


@pytest.mark.parametrize("case", [
    dict(),
    dict(pool="avg"),  # pool_sum then a division: the tail
    dict(hw_=15),  # 15x15 conv, floor pooling to 7x7: the last conv row/column is never computed
    dict(hw_=15, pool="avg"),
    dict(pk=3, hw_=18),  # 3x3 window, stride 3
    dict(cin=3, cout=16, hw_=30),  # RGB input; 15x15 pooled (edge tiles)
    dict(k=1, pad=0),  # a pointwise conv (its identity padding block stays)
    dict(k=5, pad=2, hw_=12),
    dict(stride=2, hw_=17),
    dict(pad=0, hw_=14),  # no padding
    dict(act="relu6", batch=2, cin=5, cout=12, hw_=14),
    dict(act=None),  # conv + bias + pool
    # Overlapping windows: AlexNet's and Inception's 3x3/2 max-pool, after a 7x7/2 conv too
    dict(pk=3, ps=2, hw_=17),
    dict(pk=3, ps=2, hw_=20, k=7, pad=3, stride=2, cin=3, cout=16),
    dict(pk=3, ps=1, hw_=9, pool="avg"),  # stride 1 (the tail divides)
    # Ceil mode: the last window hangs over the conv output (read under the pool's guard)
    dict(pk=3, ps=2, hw_=16, ceil=1),
    dict(pk=2, hw_=15, ceil=1, pool="avg"),
    # Padded: the conv computed over the pool's padded plane (pool_padding.unpad_pool)
    dict(pk=3, ps=2, ppad=1, hw_=17, cout=16),
    dict(pk=3, ps=2, ppad=1, hw_=20, k=7, pad=3, stride=2, cin=3, cout=16),  # a ResNet stem
    dict(pk=3, ps=2, ppad=1, hw_=17, cout=16, ceil=1, act=None),
])
def test_small_variants_apply_and_compute_the_same(case):
    target = hw.target(H200)
    func = fused_pool_func(**case)
    assert_schedule_preserves_numerics(func, ConvPool().apply(func, target, False))


def test_declines_kernels_that_are_not_conv_then_pool():
    target = hw.target(H200)
    rule = ConvPool()
    # Stock FuseOps: the conv (+bias+ReLU) and the pool in two kernels.
    stock = prim_funcs(fused_module(import_onnx(build("conv_relu_pool")), target))
    assert {"fused_conv2d_add_relu", "max_pool2d"} <= set(stock)
    declined = dict(stock)
    declined.update(prim_funcs(fused_module(import_onnx(build("relu_add_mul")), target)))
    dw_pw = hw.fusion_pass(target, pair_templates=("depthwise_conv->pointwise_conv",))
    declined.update(prim_funcs(fused_module(import_onnx(build("dw_pw")), target, dw_pw)))
    g = GraphBuilder(0)
    x = g.input("input", [2, 16, 64])
    declined["matmul"] = next(iter(prim_funcs(fused_module(
        import_onnx(g.model(g.linear(x, 64, 32), [2, 16, 32], "linear")), target)).values()))
    # A depthwise conv fused with its pool.
    depthwise = {"depthwise_conv->window", "conv->window"}
    declined["depthwise+pool"] = fused_pool_func(
        group=8, knobs={**PAIR_KNOBS, "pair_templates": depthwise})
    for name, func in declined.items():
        assert rule.apply(func, target, False) is None, name
    # A GPU rule declines CPU targets.
    assert rule.apply(fused_pool_func(), LLVM, False) is None


@pytest.mark.parametrize("case,expected", [
    (dict(), True),
    (dict(pool="avg", hw_=15), True),
    (dict(k=1, pad=0), True),  # pointwise conv
    (dict(group=8), False),  # depthwise conv
    (dict(pk=3, ps=2, hw_=17), True),  # overlapping windows
    (dict(pk=3, ps=2, ppad=1, hw_=17), True),  # padded: moved into the conv (unpad_pool)
    (dict(hw_=15, ceil=1), True),  # ceil mode: the last window hangs over (a guard at the end)
    (dict(k=9, pad=4, hw_=17), False),  # a conv kernel over ConvPool's limit
])
def test_supports_pair_judges_the_unfused_functions(case, expected):
    """What a fusion policy can ask before fusing: stock FuseOps keeps conv and pool apart."""
    funcs = prim_funcs(fused_module(import_onnx(conv_pool_model(**case)), hw.target(H200)))
    (conv,) = [f for n, f in funcs.items() if "conv" in n]
    (pool,) = [f for n, f in funcs.items() if "pool" in n]
    assert supports_pair(conv, pool) is expected
    assert not supports_pair(pool, conv)
    target = hw.target(H200)
    assert (pair_plan(conv, pool, target) is not None) is expected
    assert pair_plan(pool, conv, target) is None and pair_plan(conv, pool, LLVM) is None


def test_padded_pool_after_a_per_pixel_epilogue_input_is_declined():
    """A padded pool moves into the conv only when the epilogue reads nothing else per pixel: a
    residual added before the pool would be read outside its plane."""
    g = GraphBuilder(0)
    x = g.input("input", [1, 8, 17, 17])
    skip = g.input("skip", [1, 16, 17, 17])
    y = g.relu(g.op("Add", [g.conv(x, 8, 16, 3, pad=1, bias=True, gain=1.0), skip]))
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    target = hw.target(H200)
    funcs = prim_funcs(fused_module(import_onnx(g.model(y, [1, 16, 9, 9], "conv_add_pool")), target))
    (conv,) = [f for n, f in funcs.items() if "conv" in n]
    (pool,) = [f for n, f in funcs.items() if "pool" in n]
    assert not supports_pair(conv, pool) and pair_plan(conv, pool, target) is None


def test_unpad_pool_leaves_every_other_kernel_as_it_is():
    """ConvPool's ``prepare`` runs on every kernel offered to the rule: layer norms, attention,
    matmuls, convs without a padded pool come back unchanged, and none raises."""
    target = hw.target(H200)
    funcs = {}
    for model in ("bert_encoder_layer", "conv_relu_pool", "dw_pw", "layernorm_residual"):
        funcs.update({f"{model}/{n}": f for n, f in fused_funcs(model, 1, target).items()})
    funcs["unfused pool"] = [f for n, f in prim_funcs(fused_module(import_onnx(conv_pool_model(
        pk=3, ps=2, ppad=1, hw_=17)), target)).items() if "pool" in n][0]
    assert len(funcs) > 10
    for name, func in funcs.items():
        assert unpad_pool(func).same_as(func), name
    padded = fused_pool_func(pk=3, ps=2, ppad=1, hw_=17, cout=16)
    assert not unpad_pool(padded).same_as(padded)


@pytest.mark.parametrize("name,batch", [(H200, 1), (H200, 32), ("amd-mi300x", 1), ("nvidia-rtx-3060", 32)])
def test_pair_plan_is_the_rules_plan_of_the_fused_function(name, batch):
    """What the policy is told before fusing (on the conv and pool PrimFuncs) is the tile the rule
    then plans for the fused PrimFunc: threads, registers, shared memory, blocks, and its modelled
    time with the DRAM floor apart (what a pair's cost weighs)."""
    target = hw.target(name)
    mod = import_onnx(build("conv_relu_pool", batch=batch))
    unfused = prim_funcs(fused_module(mod, target, hw.fusion_pass(target, max_depth=1, winograd="off")))
    plan = pair_plan(unfused["conv2d"], unfused["max_pool2d"], target)
    _, tile = ConvPool().plan(conv_relu_pool_funcs(batch, name)[FUSED], target)
    assert plan == KernelPlan("ConvPool", tile.threads, tile.registers_estimate, tile.shared_bytes,
                              tile.blocks, tile.summary(), time_s=tile.time_s, compute_s=tile.compute_s,
                              dram_s=tile.dram_s)
    assert 0 < plan.dram_s < plan.time_s and 0 < plan.compute_s <= plan.time_s


# ---- (2) forced tiles: register tiles, channel chunks, padded pitch, edge tiles ----------------
@pytest.mark.parametrize("shape,chunk,unroll", [
    ((4, 16, 2, 4, 2, 4), 8, 1),  # batch 32's pick: 64 accumulators, pitch padded 18 -> 20
    ((2, 8, 1, 4, 2, 4), 8, 8),  # batch 1's pick
    ((8, 2, 1, 4, 1, 8), 16, 4),  # 8 channels per thread, unrolled channel steps
    ((1, 4, 3, 2, 1, 8), 4, 2),  # 3 window rows per thread: edge tiles on 15 pooled rows
    ((1, 2, 1, 3, 4, 16), 4, 4),  # edge tiles on both axes, 4 windows per thread along W
])
def test_forced_tiles_compute_the_same(shape, chunk, unroll):
    target = hw.target(H200)
    func = fused_pool_func(cin=16, cout=16, hw_=30)  # pooled 15x15
    rule = ConvPool()
    problem, _ = rule.plan(func, target)
    config = dataclasses.replace(rule.get_config(target), min_threads=32)
    tile = evaluate_tile(problem, gpu_limits(target), config, shape, chunk)
    assert tile is not None
    sch = rule.schedule_tile(func, target, dataclasses.replace(tile, unroll=unroll))
    assert 0 < allocated_shared_bytes(sch.mod["main"]) <= tile.shared_bytes
    assert_schedule_preserves_numerics(func, sch)


# ---- tiles within each target's limits -----------------------------------------------------------
@pytest.mark.parametrize("name", ["nvidia-h200", "nvidia-a100-80gb", "amd-mi300x", "plain-cuda"])
def test_tiles_respect_target_limits(name):
    if name == "plain-cuda":
        target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    else:
        target = hw.target(name)
    limits = gpu_limits(target)
    rule = ConvPool()
    func = conv_relu_pool_funcs(32)[FUSED]
    problem, tile = rule.plan(func, target)
    config = rule.get_config(target)
    for t in [tile] + rank_tiles(problem, limits, config)[:50]:
        assert t.threads % limits.profile.warp_size == 0
        assert t.threads <= min(limits.profile.max_threads_per_block, config.max_threads, 256)
        assert t.shared_bytes <= limits.shared_memory_bytes_per_block
        assert t.registers_estimate <= min(config.max_registers, limits.profile.max_registers_per_thread)
    sch = rule.apply(func, target, False)
    assert 0 < allocated_shared_bytes(sch.mod["main"]) <= tile.shared_bytes


@pytest.mark.parametrize("name", hw.known_profiles())
def test_tile_occupancy_is_the_vendor_method(name):
    """Blocks per SM of every ranked tile are hardware.occupancy's (cuda_occupancy.h, HIP)."""
    target = hw.target(name)
    problem = ConvPoolProblem(1, 16, 32, (28, 28), (3, 3), (1, 1), (1, 1), (2, 2), "max", 4, 0, 1)
    tiles = rank_tiles(problem, gpu_limits(target), ConvPool().get_config(target))
    assert tiles
    for tile in tiles:
        expected = occupancy(hw.load_profile(name), tile.threads, tile.registers_estimate, tile.shared_bytes)
        assert tile.blocks_per_multiprocessor == expected.blocks_per_multiprocessor, tile


# ---- the tile model's shortcuts and caches --------------------------------------------------------
def brute_force_wavefronts(starts, pieces):
    """Wavefronts of a warp's loads: per 32 lanes and piece, the most distinct words in a bank."""
    total = 0
    for offset, width in pieces:
        for first in range(0, len(starts), 32):
            words = {s + k for s in starts[first:first + 32] for k in range(offset, offset + width)}
            total += max(collections.Counter(w % 32 for w in words).values())
    return total


def brute_force_input_reads(warp, pht, pwt, step, win_cols, in_cols):
    """``shared_banks.input_reads`` simulating every lane at every pitch."""
    lanes = [((t % (pht * pwt)) // pwt, t % pwt) for t in range(warp)]
    best = None
    for pitch in range(in_cols, in_cols + 32):
        if pitch != in_cols and pitch % shared_banks.vector_alignment(step[1]):
            continue
        modelled = 32 + pitch % 32
        starts = [i * step[0] * modelled + j * step[1] for i, j in lanes]
        pieces = shared_banks._pieces(win_cols, shared_banks.vector_alignment(modelled, step[1]))
        cost = (brute_force_wavefronts(starts, pieces), len(pieces), pitch)
        best = cost if best is None else min(best, cost)
    return best[2], best[1], best[0]


def test_bank_simulation_equals_brute_force():
    rng = random.Random(0)
    for _ in range(1500):  # lanes on a grid (as the rule's threads), or anywhere, even overlapping
        warp = rng.choice([32, 64])
        if rng.random() < 0.5:
            pht, pwt, row, col = (rng.randint(1, 40) for _ in range(4))
            starts = [((t % (pht * pwt)) // pwt) * row * 8 + (t % pwt) * col for t in range(warp)]
        else:
            starts = [rng.randint(0, rng.choice([4, 40, 400])) for _ in range(warp)]
        pieces = shared_banks._pieces(rng.randint(1, 20), rng.choice([1, 2, 4]))
        assert shared_banks._load_wavefronts(starts, pieces, 32) == brute_force_wavefronts(
            starts, pieces), (starts, pieces)
    # Thread grids below, at and above a warp; rows close enough to share words (step 1 along H).
    for warp, pht, pwt, step, kw in itertools.product(
            [32, 64], [1, 3, 4, 16, 40], [1, 2, 7, 8, 64], [(1, 1), (2, 2), (4, 4), (6, 2), (3, 8)],
            [1, 3, 7]):
        win_cols, in_cols = step[1] - 1 + kw, step[1] * pwt - 1 + kw
        args = (warp, pht, pwt, step, win_cols, in_cols)
        assert shared_banks.input_reads(*args) == brute_force_input_reads(*args), args


def test_rankings_are_kept_until_the_caches_are_cleared(monkeypatch):
    target = hw.target(H200)
    limits, config = gpu_limits(target), ConvPool().get_config(target)
    problem = ConvPoolProblem(1, 16, 16, (15, 15), (3, 3), (1, 1), (1, 1), (2, 2), "max", 4, 0, 1)
    computed = []
    rank = conv_pool_tiles._rank
    monkeypatch.setattr(conv_pool_tiles, "_RANKED", RememberedRanking(
        lambda *args: computed.append(1) or rank(*args), maxsize=16))
    conv_pool_tiles.clear_caches()
    first = rank_tiles(problem, limits, config)
    kept = list(first)
    first.clear()  # the caller's own list
    assert rank_tiles(problem, limits, config) == kept and len(computed) == 1
    assert rank_tiles(problem, limits, dataclasses.replace(config, shortlist=8)) != kept
    assert len(computed) == 2  # another config: ranked anew
    conv_pool_tiles.clear_caches()
    # every cache of the tile model and of its bank simulation (conv_pool_tiles imports some of the
    # latter's by name: counted once)
    caches = {id(f): f for module in (conv_pool_tiles, shared_banks) for f in vars(module).values()
              if hasattr(f, "cache_info") and not isinstance(f, type)}
    assert len(caches) >= 7 and all(f.cache_info().currsize == 0 for f in caches.values())
    assert rank_tiles(problem, limits, config) == kept and len(computed) == 3


# ---- (3) builds; (4) one kernel, shared memory, no spills ----------------------------------------
@pytest.mark.parametrize("name", ["nvidia-a100-80gb", "amd-mi300x"])
def test_conv_relu_pool_builds(name, monkeypatch):
    target = hw.target(name)
    if target.kind.name == "rocm":
        if not toolchain.have_rocm_toolchain():
            pytest.skip("no ROCm toolchain (ld.lld 22, device libraries)")
        toolchain.configure_rocm()
    ex = compile_conv_relu_pool(target, monkeypatch)
    if target.kind.name == "cuda":
        assert list(kernels_of(cuda_source(ex), FUSED)) == [f"{FUSED}_kernel"]
    else:
        fused = [k for k in kernel_resources.measure(ex, target) if k.name.startswith(FUSED)]
        assert len(fused) == 1 and fused[0].spilled_registers == 0
        assert fused[0].threads_per_block <= 256 and fused[0].static_shared_bytes > 0


@pytest.fixture(scope="module")
def sm90_builds():
    """{batch: executable with the rule} for conv_relu_pool on the H200; "dlight": without it."""
    target = hw.target(H200)
    with pytest.MonkeyPatch.context() as mp:
        out = {batch: compile_conv_relu_pool(target, mp, batch) for batch in (1, 32)}
        out["dlight"] = compile_conv_relu_pool(target, mp, 1, rule=False)
    return out


@pytest.mark.parametrize("batch", [1, 32])
def test_sm90_one_kernel_with_shared_memory_and_no_spills(sm90_builds, batch):
    target = hw.target(H200)
    source = cuda_source(sm90_builds[batch])
    ours = kernels_of(source, FUSED)
    assert list(ours) == [f"{FUSED}_kernel"]
    assert "__shared__" in ours[f"{FUSED}_kernel"] and "__syncthreads()" in ours[f"{FUSED}_kernel"]
    # Without the rule no template runs the pair: the pipeline stages it (conv and pool are two
    # kernels, the conv result through global memory) instead of leaving the fused group to dlight.
    without = cuda_source(sm90_builds["dlight"])
    assert not kernels_of(without, FUSED) and kernels_of(without, "max_pool2d")
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: one kernel and shared memory checked in the source only")
    _, tile = ConvPool().plan(conv_relu_pool_funcs(batch)[FUSED], target)
    measured = kernel_resources.measure(sm90_builds[batch], target)
    (kernel,) = [k for k in measured if k.name.startswith(FUSED)]
    print(f"b{batch}: {kernel.registers} registers, {kernel.static_shared_bytes} B smem, "
          f"{kernel.threads_per_block} threads x {kernel.grid_blocks} blocks, spills "
          f"{kernel.spill_store_bytes}/{kernel.spill_load_bytes}; "
          f"estimated {tile.registers_estimate}")
    assert kernel.spill_store_bytes == kernel.spill_load_bytes == kernel.stack_frame_bytes == 0
    assert kernel.static_shared_bytes == tile.shared_bytes
    assert (kernel.threads_per_block, kernel.grid_blocks) == (tile.threads, tile.blocks)
    assert kernel.registers <= tile.registers_estimate + 8


@pytest.mark.parametrize("case", [
    dict(cin=64, cout=192, hw_=27, k=5, pad=2, batch=1),  # AlexNet's second conv and pool
    dict(cin=64, cout=192, hw_=27, k=5, pad=2, batch=32),
    dict(cin=64, cout=80, hw_=73, k=3, pad=0, batch=1),
    dict(cin=64, cout=80, hw_=73, k=3, pad=0, batch=32),  # Inception v3's before its second pool
    dict(cin=64, cout=192, hw_=56, k=3, pad=1, ceil=1, batch=1),  # GoogLeNet's, ceil mode
    dict(cin=64, cout=192, hw_=56, k=3, pad=1, ceil=1, batch=32),
    dict(cin=3, cout=64, hw_=224, k=7, pad=3, stride=2, ppad=1, batch=1),  # a ResNet stem, padded
    dict(cin=3, cout=64, hw_=224, k=7, pad=3, stride=2, ppad=1, batch=32),
])
def test_overlapping_pools_build_without_spills_registers_as_estimated(case):
    """A 3x3/2 max-pool after a conv: the tile the rule picks builds for sm_90 without spills
    or local memory, its registers at most near the estimate and its shared memory as planned (ptxas,
    not the formula)."""
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    target = hw.target(H200)
    func = fused_pool_func(pk=3, ps=2, **case)
    rule = ConvPool()
    problem, tile = rule.plan(func, target)
    assert (problem.window, problem.pool_strides) == ((3, 3), (2, 2))
    source = cuda_source(compile_func(rule.apply(func, target, False).mod["main"], target))
    (kernel,) = ptxas_kernels(source).values()
    print(f"{case}: {tile.summary()}; ptxas {kernel.registers} registers, estimated {tile.registers_estimate}")
    assert kernel.spill_store_bytes == kernel.spill_load_bytes == kernel.stack_frame_bytes == 0
    # nvcc aligns each of the two shared arrays to 64 bytes
    assert 0 <= kernel.static_shared_bytes - tile.shared_bytes < 2 * 64
    # within a few registers, or high (a strided conv's estimate is a coarser fit: up to 17 low)
    assert kernel.registers <= tile.registers_estimate + (16 if max(problem.stride) > 1 else 8)


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 32])
def test_conv_relu_pool_on_gpu_matches_stock(batch, monkeypatch):
    target = hw.target(H200)
    dev = tvm.cuda(0)
    outs, times = {}, {}
    for name, relax_pipeline in (("stock", hw.stock_pipeline(target)), ("rule", pipeline(target, monkeypatch))):
        outs[name], vm, args = run_model("conv_relu_pool", batch, target, relax_pipeline, dev)
        times[name] = vm.time_evaluator("main", dev, number=20, repeat=5)(*args).median * 1e3
    print(f"conv_relu_pool b{batch}: stock {times['stock']:.3f} ms, "
          f"ConvPool {times['rule']:.3f} ms")
    np.testing.assert_allclose(outs["rule"], outs["stock"], rtol=1e-4, atol=1e-4)
