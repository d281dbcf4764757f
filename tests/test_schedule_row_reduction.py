"""Tests for schedules/row_reduction/: the RowReduction schedule rule (and its tile model).

CPU only, except the tests marked gpu. Checked:
- in the zoo (our fusion for the H200) the rule takes exactly the row kernels: the fused residual
  LayerNorm of layernorm_residual, BERT's LayerNorm and softmax (batch 1 and 32), the global
  average pool of ResNet-50 and MobileNetV2; none of them is a kernel another template plans;
- the tile follows the hardware profile: a row per warp (32 lanes, BERT's 768-wide rows as 24
  values a lane in float4s) on the H200, per wavefront (64 lanes) on an MI300X within ROCm's
  256 threads, a row per block of several warps where a row outgrows a warp's registers;
- each row is read from global memory once (one block reads the input; dlight's
  GeneralReduction reads it in every pass: 3 for a LayerNorm or a softmax);
- its schedules compute what the unscheduled PrimFunc computes (thread loops made serial, LLVM);
- the CUDA kernels (sm_90) reduce with warp shuffles, load and store float4, keep the row in a
  register array, and ptxas (when nvcc is present) reports no spills; gfx942 builds, no spills;
- a GEMV (rows of W against one shared x; a squeeze-and-excitation FC at batch 1, a 1x1 conv of a
  1x1 image whose extent-1 axes index as 0) is rows too: planned, and computes the same;
- it declines element-wise kernels, matmul (rows sharing rows of an operand), reductions not along
  the trailing axes, windowed pools, dynamic shapes, CPU; rows the warp does not divide (197, 49,
  16 values) are streamed, each pass reading the row again;
- BERT's encoder layer builds with the full pipeline and explain_schedules names the rule;
- on a CUDA GPU (marked ``gpu``): layernorm_residual and BERT's layer equal LLVM's outputs, and
  equal stock TVM's at batch 1 and 32 (MobileNetV2 for the pool); every row kernel (the fused
  residual LayerNorm, BERT's LayerNorm and softmax, the global average pools of ResNet-50 and
  MobileNetV2, batch 1 and 32) alone, scheduled by the rule, equals the same PrimFunc scheduled
  by dlight's default rules, as stock TVM schedules it; times printed.
"""

import functools
import math
import re

import pytest
import tvm
from tvm import relax
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import kernel_resources
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.pipeline import fused_module, schedule_pass
from tvm_fusion_hw.schedule_report import explain_schedules
from tvm_fusion_hw.schedules import ConvPool, DepthwiseConv, ImplicitGemm, RowReduction, VectorizedElementwise
from tir_checks import (LLVM, assert_schedule_preserves_numerics, blocks, compile_func, cuda_source, fused_funcs,
                        kernel_body, prim_funcs, row_sum, run_model, shared_rmw_by_every_thread)

H200 = "nvidia-h200"
#: (model, batch) -> the kernels the rule takes in our fusion for the H200.
ROW_KERNELS = {
    ("layernorm_residual", 1): {"fused_add_add1_layer_norm"},
    ("bert_encoder_layer", 1): {"layer_norm", "softmax"},
    ("bert_encoder_layer", 32): {"layer_norm", "softmax"},
    ("resnet50", 1): {"mean"},
    ("mobilenet_v2", 1): {"mean"},
}


# ---- helpers -----------------------------------------------------------------------------------
def relax_func(op, shape, target, params=0):
    """The one fused PrimFunc of ``op(x, *params)`` on ``x`` of ``shape`` (params: 1-D rows)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    ps = [relax.Var(f"p{i}", relax.TensorType((shape[-1],), "float32")) for i in range(params)]
    with bb.function("main", [x, *ps]):
        with bb.dataflow():
            out = bb.emit_output(op(x, *ps))
        bb.emit_func_output(out)
    (func,) = prim_funcs(fused_module(bb.get(), target, hw.fusion_pass(target))).values()
    return func


def layer_norm(shape, target):
    return relax_func(lambda x, g, b: relax.op.nn.layer_norm(x, g, b, axes=[-1]), shape, target, params=2)


def softmax(shape, target):
    return relax_func(lambda x: relax.op.nn.softmax(x, axis=-1), shape, target)


def se_fc(c_in, c_out, target):
    """A squeeze-and-excitation FC at batch 1, fused: a 1x1 conv of a 1x1 image, bias, sigmoid."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c_in, 1, 1), "float32"))
    w = relax.Var("w", relax.TensorType((c_out, c_in, 1, 1), "float32"))
    b = relax.Var("b", relax.TensorType((1, c_out, 1, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.sigmoid(relax.op.add(relax.op.nn.conv2d(x, w), b)))
        bb.emit_func_output(out)
    (func,) = prim_funcs(fused_module(bb.get(), target, hw.fusion_pass(target))).values()
    return func


def readers_of(sch, buffer_name):
    """Blocks of a schedule that read the parameter named ``buffer_name`` (one per global pass)."""
    return [b.name_hint for b in blocks(sch.mod["main"].body) if any(r.source.name == buffer_name for r in b.reads)]


# ---- synthetic PrimFuncs -----------------------------------------------------------------------
# pylint: disable=invalid-name,no-self-argument
@T.prim_func(private=True, s_tir=True)
def relu(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64, 128), "float32")):
    for i, j in T.grid(64, 128):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = T.max(A[vi, vj], T.float32(0))


@T.prim_func(private=True, s_tir=True)
def matmul(A: T.Buffer((64, 128), "float32"), B: T.Buffer((128, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 128):
        with T.sblock("mm"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func(private=True, s_tir=True)
def matmul_nt(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64, 128), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 128):
        with T.sblock("mm"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]


@T.prim_func(private=True, s_tir=True)
def gemv(W: T.Buffer((256, 128), "float32"), x: T.Buffer((128,), "float32"), y: T.Buffer((256,), "float32")):
    for j, k in T.grid(256, 128):
        with T.sblock("gemv"):
            vj, vk = T.axis.remap("SR", [j, k])
            with T.init():
                y[vj] = T.float32(0)
            y[vj] = y[vj] + W[vj, vk] * x[vk]


@T.prim_func(private=True, s_tir=True)
def channel_sum(A: T.Buffer((2, 64, 16, 16), "float32"), B: T.Buffer((2, 16, 16), "float32")):
    for n, h, w, c in T.grid(2, 16, 16, 64):
        with T.sblock("sum"):
            vn, vh, vw, vc = T.axis.remap("SSSR", [n, h, w, c])
            with T.init():
                B[vn, vh, vw] = T.float32(0)
            B[vn, vh, vw] = B[vn, vh, vw] + A[vn, vc, vh, vw]


@T.prim_func(private=True, s_tir=True)
def max_pool(A: T.Buffer((2, 16, 32, 32), "float32"), B: T.Buffer((2, 16, 16, 16), "float32")):
    for n, c, h, w, kh, kw in T.grid(2, 16, 16, 16, 2, 2):
        with T.sblock("pool"):
            vn, vc, vh, vw, vkh, vkw = T.axis.remap("SSSSRR", [n, c, h, w, kh, kw])
            with T.init():
                B[vn, vc, vh, vw] = T.float32(-3.4e38)
            B[vn, vc, vh, vw] = T.max(B[vn, vc, vh, vw], A[vn, vc, vh * 2 + vkh, vw * 2 + vkw])


@T.prim_func(private=True, s_tir=True)
def dynamic_sum(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, 128), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i, k in T.grid(n, 128):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
# pylint: enable=invalid-name,no-self-argument


# ---- fixtures (h200: conftest.py) ------------------------------------------------------------
@pytest.fixture(scope="session")
def zoo_funcs(h200):
    """{(model, batch): {name: PrimFunc}} of the models with row kernels, fused for the H200."""
    # without the attention chain: BERT's batch-1 softmax would be inside the attention kernel
    return {key: fused_funcs(*key, h200, attention=False) for key in ROW_KERNELS}


@pytest.fixture(scope="session")
def row_builds(h200):
    """{model: executable} of layernorm_residual and BERT (batch 1) built with the rule alone."""
    return {m: tvm.compile(import_onnx(build(m, batch=1), keep_params_in_input=True), target=h200,
                           relax_pipeline=hw.get_pipeline(h200, schedules=[RowReduction()]))
            for m in ("layernorm_residual", "bert_encoder_layer")}


# ---- what the rule takes -----------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(ROW_KERNELS), ids=lambda k: f"{k[0]}-b{k[1]}")
def test_takes_exactly_the_row_kernels(zoo_funcs, h200, key):
    funcs = zoo_funcs[key]
    rule = RowReduction()
    taken = {name for name, func in funcs.items() if rule.apply(func, h200, False) is not None}
    assert taken == ROW_KERNELS[key]
    others = [ConvPool(), DepthwiseConv(), ImplicitGemm(), VectorizedElementwise()]
    for name in taken:  # no other template of ours plans them: the order of the rules is moot
        assert all(other.plan(funcs[name], h200) is None for other in others), name


@pytest.mark.parametrize("key, name, threads, lanes, values, passes", [
    (("layernorm_residual", 1), "fused_add_add1_layer_norm", 32, 4, 24, 3),
    (("bert_encoder_layer", 1), "layer_norm", 32, 4, 24, 3),
    (("bert_encoder_layer", 32), "layer_norm", 32, 4, 24, 3),
    (("bert_encoder_layer", 1), "softmax", 32, 4, 4, 3),
    (("resnet50", 1), "mean", 32, 1, 2, 1),
    (("mobilenet_v2", 1), "mean", 32, 1, 2, 1),
])
def test_a_row_per_warp_on_the_h200(zoo_funcs, h200, key, name, threads, lanes, values, passes):
    problem, tile = RowReduction().plan(zoo_funcs[key][name], h200)
    assert (tile.threads_per_row, tile.lanes, tile.values_per_thread) == (threads, lanes, values)
    assert problem.dlight_passes == passes
    assert tile.threads <= 256 and tile.blocks * tile.rows_per_block == problem.rows
    assert "a row per warp" in tile.summary()


def test_the_row_is_read_once_where_dlight_reads_it_per_pass(zoo_funcs, h200):
    for key, name, inputs in [(("layernorm_residual", 1), "fused_add_add1_layer_norm", ["input", "residual"]),
                              (("bert_encoder_layer", 1), "layer_norm", ["lv20"])]:
        func = zoo_funcs[key][name]
        with h200:
            stock = dl.gpu.GeneralReduction().apply(func, h200, False)
        ours = RowReduction().apply(func, h200, False)
        for buffer in inputs:
            assert len(readers_of(stock, buffer)) == 3, (name, buffer)
            assert len(readers_of(ours, buffer)) == 1, (name, buffer)


def test_a_wavefront_per_row_on_the_mi300x():
    target = hw.target("amd-mi300x")
    funcs = fused_funcs("bert_encoder_layer", 32, target)
    for name, values in (("layer_norm", 12), ("softmax", 2)):
        _, tile = RowReduction().plan(funcs[name], target)
        assert tile.threads_per_row == 64 and tile.values_per_thread == values
        assert tile.threads <= 256  # TVM's AMDGPU codegen assumes at most 256


def test_long_rows_take_a_block(h200):
    """4096 values a row: 128 a lane would overflow the registers; 4 warps share a row."""
    func = layer_norm((64, 4096), h200)
    problem, tile = RowReduction().plan(func, h200)
    assert problem.length == 4096 and tile.threads_per_row > 32
    assert "a row per block" in tile.summary()
    assert_schedule_preserves_numerics(func, RowReduction().apply(func, h200, False), reassociates=True)
    source = cuda_source(compile_func(RowReduction().apply(func, h200, False).mod["main"], h200))
    assert "__shfl_down_sync(" in source and "__syncthreads()" in source  # warps combine in shared
    # the mean is not computed in place in the shared result by every thread (a race between
    # the warps: ConvNeXt's and Swin's LayerNorms at batch 32 were wrong on the H200)
    assert shared_rmw_by_every_thread(source) == []


@pytest.mark.parametrize("func", [relu, matmul, matmul_nt, channel_sum, max_pool, dynamic_sum],
                         ids=["elementwise", "matmul", "matmul_nt", "channel_sum", "max_pool", "dynamic"])
def test_declines(h200, func):
    assert RowReduction().apply(func, h200, False) is None


def test_a_gemv_is_rows_that_share_one_vector(h200):
    """Each row of W reduced against the one x every row reads: a row per warp, float4 loads of W."""
    problem, tile = RowReduction().plan(gemv, h200)
    assert (problem.spatial, problem.reduced, problem.cached) == ((256,), (128,), ())
    assert (tile.threads_per_row, tile.lanes, tile.values_per_thread, tile.passes) == (32, 4, 4, 1)
    assert_schedule_preserves_numerics(gemv, RowReduction().apply(gemv, h200, False), reassociates=True,
                                       blocks_reversed=True)


@pytest.mark.parametrize("c_in, c_out, lanes, guarded", [(128, 32, 4, False), (96, 24, 2, True),
                                                         (24, 96, 1, True)],
                         ids=["128_to_32", "96_to_24_last_vector_guarded", "24_to_96_short_row"])
def test_a_squeeze_excitation_fc_at_batch_1_is_a_gemv(h200, c_in, c_out, lanes, guarded):
    """``x[0, rc, yy + ry, xx + rx]`` with every other axis of extent 1: rows of W along ``rc``."""
    func = se_fc(c_in, c_out, h200)
    problem, tile = RowReduction().plan(func, h200)
    assert math.prod(problem.spatial) == c_out and math.prod(problem.reduced) == c_in
    assert (tile.lanes, tile.guarded) == (lanes, guarded)
    assert_schedule_preserves_numerics(func, RowReduction().apply(func, h200, False), reassociates=True,
                                       blocks_reversed=True)


@pytest.mark.parametrize("make, shape", [(softmax, (6, 197)), (softmax, (4, 3, 49)), (softmax, (10, 16)),
                                         (layer_norm, (64, 100)), (softmax, (64, 1000))],
                         ids=["vit_197", "window_49", "short_16", "layer_norm_100", "softmax_1000"])
def test_rows_the_warp_does_not_divide_are_streamed(h200, make, shape):
    """A ViT's 197 tokens, a 7x7 window's 49: the register layout has no guards, so nothing is
    kept in registers and every pass reads the row again (as many passes as dlight's)."""
    func = make(shape, h200)
    problem, tile = RowReduction().plan(func, h200)
    assert problem.cached == () and problem.kept == [] and tile.guarded
    assert tile.passes == problem.dlight_passes == 3
    assert "read 3 times" in tile.summary()
    sch = RowReduction().apply(func, h200, False)
    assert len(readers_of(sch, "x")) == 3
    assert_schedule_preserves_numerics(func, sch, reassociates=True, blocks_reversed=True)


def test_declines_cpu_targets(zoo_funcs):
    assert RowReduction().apply(zoo_funcs[("bert_encoder_layer", 1)]["layer_norm"], LLVM, False) is None


# ---- semantics on the CPU ----------------------------------------------------------------------
@pytest.mark.parametrize("key, name", [(k, n) for k, names in sorted(ROW_KERNELS.items()) for n in sorted(names)],
                         ids=lambda x: x if isinstance(x, str) else f"{x[0]}-b{x[1]}")
def test_zoo_schedules_compute_the_same(zoo_funcs, h200, key, name):
    func = zoo_funcs[key][name]
    assert_schedule_preserves_numerics(func, RowReduction().apply(func, h200, False), reassociates=True)


@pytest.mark.parametrize("name", ["row_sum", "softmax_96", "layer_norm_mi300x"])
def test_synthetic_schedules_compute_the_same(h200, name):
    target = hw.target("amd-mi300x") if name.endswith("mi300x") else h200
    func = {"row_sum": lambda: row_sum, "softmax_96": lambda: softmax((2, 64, 96), target),
            "layer_norm_mi300x": lambda: layer_norm((4, 128, 768), target)}[name]()
    assert_schedule_preserves_numerics(func, RowReduction().apply(func, target, False), reassociates=True)


# ---- the kernels ---------------------------------------------------------------------------------
@pytest.mark.parametrize("model, kernel, loads", [
    ("layernorm_residual", "fused_add_add1_layer_norm", ["input", "residual"]),
    ("bert_encoder_layer", "layer_norm", ["lv20"]),
    ("bert_encoder_layer", "softmax", []),
])
def test_sm90_kernels_shuffle_and_keep_rows_in_registers(row_builds, h200, model, kernel, loads):
    body = kernel_body(cuda_source(row_builds[model]), f"{kernel}_kernel")
    assert "__shfl_down_sync(" in body and "__shfl_sync(" in body  # reduce, then broadcast
    assert "__shared__" not in body and "__syncthreads" not in body  # a warp per row: no shared
    assert re.search(r"= \*\(float4\*\)\(\w+_ptr \+", body)  # vector loads
    assert re.search(r"\*\(float4\*\)\(T_\w+_ptr \+[^;]*\) = ", body)  # vector stores of the output
    for name in loads:  # 768 values a row, 24 a lane: 6 float4 loads of each input, once
        assert len(re.findall(rf"\*\(float4\*\)\({name}_ptr \+", body)) == 6, name
        assert re.search(r"float \w+_local_ptr\[24\];", body)
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: the source checked only")
    measured = {k.name: k for k in kernel_resources.measure(row_builds[model], h200)}
    found = measured[f"{kernel}_kernel"]
    print(f"{model} {kernel}: {found.registers} registers, {found.threads_per_block} threads x "
          f"{found.grid_blocks} blocks")
    assert found.spill_store_bytes == found.spill_load_bytes == found.stack_frame_bytes == 0
    _, tile = RowReduction().plan(fused_funcs(model, 1, h200, attention=False)[kernel], h200)
    assert (found.threads_per_block, found.grid_blocks) == (tile.threads, tile.blocks)
    assert found.registers <= tile.registers_estimate * 1.15  # the model within ~10%


def test_mi300x_build():
    target = hw.target("amd-mi300x")
    if not toolchain.have_rocm_toolchain():
        pytest.skip("no ROCm toolchain (ld.lld 22, device libraries): run scripts/install-system-deps.sh")
    toolchain.configure_rocm()
    mod = import_onnx(build("bert_encoder_layer", batch=1), keep_params_in_input=True)
    ex = tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target, schedules=[RowReduction()]))
    measured = {k.name: k for k in kernel_resources.measure(ex, target)}
    for name in ("layer_norm_kernel", "softmax_kernel"):
        kernel = measured[name]
        print(f"{name} gfx942: {kernel.registers} VGPRs, {kernel.threads_per_block} threads x {kernel.grid_blocks}")
        assert kernel.threads_per_block % 64 == 0 and kernel.threads_per_block <= 256
        assert not kernel.spills


# ---- the full pipeline ---------------------------------------------------------------------------
def test_bert_layer_builds_with_the_rule_in_the_default_pipeline(h200):
    mod = import_onnx(build("bert_encoder_layer", batch=1))
    choices = {c.kernel: c for c in explain_schedules(mod, h200)}
    assert choices["layer_norm"].rule == "RowReduction" and "a row per warp" in choices["layer_norm"].detail
    # the softmax is inside the attention kernel at batch 1 (schedules/attention/)
    assert [c.rule for name, c in choices.items() if "softmax" in name] == ["Attention"]
    source = cuda_source(tvm.compile(mod, target=h200, relax_pipeline=hw.get_pipeline(h200)))
    assert "__shfl_down_sync(" in kernel_body(source, "layer_norm_kernel")


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("model", ["layernorm_residual", "bert_encoder_layer"])
def test_models_on_gpu_match_llvm(model):
    import numpy as np  # pylint: disable=import-outside-toplevel

    target = hw.target(H200)
    gpu = run_model(model, 1, target, hw.get_pipeline(target, schedules=[RowReduction()]), tvm.cuda(0))[0]
    cpu = run_model(model, 1, LLVM, hw.get_pipeline(LLVM, profile=H200), tvm.cpu())[0]
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)


#: (model, batch, kernel): every row kernel of the zoo at both batch sizes, for the GPU checks.
GPU_KERNELS = [(m, b, k) for m, k in (("layernorm_residual", "fused_add_add1_layer_norm"),
                                      ("bert_encoder_layer", "layer_norm"), ("bert_encoder_layer", "softmax"),
                                      ("resnet50", "mean"), ("mobilenet_v2", "mean")) for b in (1, 32)]


@functools.lru_cache(maxsize=None)
def _fused_h200(model, batch):
    return fused_funcs(model, batch, hw.target(H200), attention=False)


def build_kernel(func, rules, target):
    """``func`` alone as symbol ``k``, scheduled as ``get_pipeline`` does: ``rules`` first, then
    dlight's defaults (with ``rules`` empty: dlight's defaults alone, stock TVM's schedule)."""
    mod = tvm.IRModule({"k": func.with_attr("global_symbol", "k")})
    with target:
        mod = schedule_pass(rules)(mod)
    return tvm.compile(mod, target=target)


@pytest.mark.gpu
@pytest.mark.parametrize("model, batch", [("layernorm_residual", 1), ("layernorm_residual", 32),
                                          ("bert_encoder_layer", 1), ("bert_encoder_layer", 32),
                                          ("mobilenet_v2", 1)])
def test_models_on_gpu_match_stock(model, batch):
    import numpy as np  # pylint: disable=import-outside-toplevel

    target, dev = hw.target(H200), tvm.cuda(0)
    outs, times = {}, {}
    for name, pipeline in (("stock", hw.stock_pipeline(target)),
                           ("rule", hw.get_pipeline(target, schedules=[RowReduction()]))):
        outs[name], vm, args = run_model(model, batch, target, pipeline, dev)
        times[name] = vm.time_evaluator("main", dev, number=20, repeat=5)(*args).median * 1e3
    print(f"{model} b{batch}: stock {times['stock']:.3f} ms, hw fusion + RowReduction {times['rule']:.3f} ms")
    np.testing.assert_allclose(outs["rule"], outs["stock"], rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("model, batch, kernel", GPU_KERNELS, ids=lambda x: str(x))
def test_row_kernels_on_gpu_match_dlight(model, batch, kernel):
    """The rule's kernel against dlight's schedule of the same PrimFunc (the output starts as NaN:
    every element must be written)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    target, dev = hw.target(H200), tvm.cuda(0)
    func = _fused_h200(model, batch)[kernel]
    assert RowReduction().apply(func, target, False) is not None  # the rule takes it
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    # 1-D parameters (LayerNorm's scale and shift) near 1; the rest standard normal
    inputs = [(rng.uniform(0.5, 1.5, s) if len(s) <= 1 else rng.standard_normal(s)).astype("float32")
              for s in shapes[:-1]]
    outs, times = {}, {}
    for name, rules in (("dlight", []), ("rule", [RowReduction()])):
        ex = build_kernel(func, rules, target)
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        args.append(tvm.runtime.tensor(np.full(shapes[-1], np.nan, "float32"), dev))
        ex["k"](*args)
        outs[name] = args[-1].numpy()
        times[name] = ex.mod.time_evaluator("k", dev, number=50, repeat=3)(*args).median * 1e6
    print(f"{model} b{batch} {kernel}: RowReduction {times['rule']:.1f} us, dlight {times['dlight']:.1f} us")
    assert np.isfinite(outs["dlight"]).all() and np.isfinite(outs["rule"]).all()
    np.testing.assert_allclose(outs["rule"], outs["dlight"], rtol=1e-4, atol=1e-5)
