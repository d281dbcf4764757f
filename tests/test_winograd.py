"""Tests for Winograd convolution: the rewrite (tvm_fusion_hw/winograd_conv.py), its transforms and
their schedule rule (schedules/winograd). CPU only; checked:
- the matrices: ``A^T [(G g) * (B^T d)]`` is the 3-tap correlation of ``d`` with ``g`` (numpy's);
- whole convolutions (padding, sizes that tiles do not divide, a filter that is a parameter, F(2x2)
  and F(4x4)) built on the CPU through the pipeline match TVM's direct convolution;
- the profile decides (both ways costed with the tile model, winograd_cost.py): a 64-channel layer
  at batch 32 and a 512-channel 7x7 layer at batch 1 are Winograd on the H200 and direct on the RTX
  3060 (short of bandwidth for the transforms, the transformed filter): Before / Expected kernels
  under both; the 512-channel layer is direct on the H100 too (its 3.35 TB/s against the H200's 4.8); a 3-channel layer stays direct; strided, grouped and 1x1 convolutions are never
  considered;
- the transform schedules compute what their PrimFuncs compute, and build for sm_90 without spills.
"""

import json
import re

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.fusion.analysis import WINDOW_ATTR
from tvm_fusion_hw.fusion.graph import COMM_REDUCE, OUT_EWISE_FUSABLE
from tvm_fusion_hw.fusion.policy import WINOGRAD_TILES
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.hardware.profile import load_profile
from tvm_fusion_hw.pipeline import fused_module, kernel_names
from tvm_fusion_hw.schedules.winograd.rule import WinogradTransform
from tvm_fusion_hw.schedules.planners import kernel_estimate, kernel_plan
from tvm_fusion_hw.schedules.winograd.transforms import TILE_SIZES, WinogradShape, matrices
from tvm_fusion_hw.winograd_conv import WINOGRAD, WinogradConv2d
from tvm_fusion_hw.winograd_cost import WinogradCostModel, direct_func, gemm_func
from tir_checks import LLVM, assert_schedule_preserves_numerics, prim_funcs, ptxas_kernels
from script_loader import BENCH, load_script

H200, H100, RTX3060 = "nvidia-h200", "nvidia-h100-sxm", "nvidia-rtx-3060"


@pytest.mark.parametrize("m", TILE_SIZES)
def test_the_matrices_correlate(m):
    bt, g, at = matrices(m)
    rng = np.random.default_rng(m)
    d, w = rng.standard_normal(m + 2), rng.standard_normal(3)
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"), rtol=1e-12, atol=1e-12)


def conv_module(n=2, c=16, size=(13, 11), k=24, pad=1, stride=1, groups=1, kernel=3, weight_param=False):
    """conv2d (+ bias + ReLU) with a constant filter, or the filter as a parameter."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, c // groups, kernel, kernel)).astype("float32") / (c * kernel)
    b = rng.standard_normal((1, k, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, *size), "float32"))
    params = [x] + ([relax.Var("w", relax.TensorType(w.shape, "float32"))] if weight_param else [])
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, params[1] if weight_param else relax.const(w), strides=stride,
                                           padding=pad, groups=groups))
            y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(b))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    inputs = [rng.standard_normal((n, c, *size)).astype("float32")] + ([w] if weight_param else [])
    return bb.get(), inputs


def run_cpu(mod, inputs, pipeline):
    vm = relax.VirtualMachine(tvm.compile(mod, target=LLVM, relax_pipeline=pipeline), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()


@pytest.mark.parametrize("m,shape", [
    (4, dict()),  # 13 x 11 output: the last tiles overhang it
    (2, dict()),
    (4, dict(pad=0, size=(14, 14))),
    (4, dict(weight_param=True)),  # the filter transform as a kernel
])
def test_a_winograd_conv_matches_the_direct_one(m, shape):
    mod, inputs = conv_module(**shape)
    pipeline = hw.get_pipeline(LLVM, profile=H200, winograd="always", winograd_tile=m)
    ours = run_cpu(mod, inputs, pipeline)
    direct = run_cpu(mod, inputs, hw.get_pipeline(LLVM, profile=H200, winograd="off"))
    assert [d.fused for d in pipeline.fuse_pass.report.find(WINOGRAD)] == [True]
    assert np.linalg.norm(ours - direct) / np.linalg.norm(direct) < 1e-5


def winograd_kernels(mod, profile):
    fuse = hw.fusion_pass(profile)
    names = kernel_names(fused_module(mod, hw.target(profile), fuse))
    return [n for n in names if "winograd" in n or "matmul" in n or "conv2d" in n], fuse.report.find(WINOGRAD)


def test_the_profile_decides_a_64_channel_layer():
    """F(4x4) saves 0.375 x 64 = 24 FLOP per byte it adds, above the H200's ridge (14) and below the
    RTX 3060's (35): there the transforms' 231 MB cost more than the GEMM saves."""
    mod, _ = conv_module(n=32, c=64, size=(56, 56), k=64)
    on_h200, (decision,) = winograd_kernels(mod, H200)
    assert on_h200 == ["winograd_data", "matmul", "fused_winograd_output_add_relu"]
    assert decision.fused and decision.figures["saved_flop_per_added_byte"] == 24.0
    assert decision.consumer == "F(4x4,3x3)"
    on_3060, (decision,) = winograd_kernels(mod, RTX3060)
    assert on_3060 == ["fused_conv2d_add_relu"]
    assert not decision.fused and "ridge 35" in decision.reason


def test_a_late_layer_at_batch_1_follows_the_bandwidth():
    """7x7 x 512 at batch 1: Winograd's GEMM reads a filter 4x the direct one's (36 against 9
    values per filter). On the H200 that costs little (measured per kernel, bench/results/
    2026-12-04-h200-winograd/res4: 21.3 us by Winograd against 23.0 direct); on the RTX 3060 the
    37.7 MB transformed filter alone takes over 100 us at its 360 GB/s, more than the direct conv's
    FLOPs at its peak and its 9.4 MB filter."""
    mod, _ = conv_module(n=1, c=512, size=(7, 7), k=512)
    on_h200, (decision,) = winograd_kernels(mod, H200)
    assert on_h200 == ["winograd_data", "matmul", "fused_winograd_output_add_relu"] and decision.fused
    on_3060, (decision,) = winograd_kernels(mod, RTX3060)
    assert on_3060 == ["fused_conv2d_add_relu"] and not decision.fused
    profile = load_profile(RTX3060)
    transformed_filter_s = 36 * 512 * 512 * 4 / profile.dram_bytes_per_s
    direct_bound_s = max(2 * 512 * 512 * 9 * 49 / profile.peak_fp32_flop_per_s,
                         (512 * 512 * 9 + 2 * 512 * 49) * 4 / profile.dram_bytes_per_s)
    assert transformed_filter_s > 2 * direct_bound_s
    assert decision.figures["gemm_us"] > transformed_filter_s * 1e6


def test_the_late_layer_is_direct_on_the_h100():
    """The same layer on the H100, whose SMs and tiles are the H200's and whose bandwidth is 30%
    less: the GEMM streaming its 37.7 MB transformed filter now costs more than Winograd saves.
    Measured there (bench/results/2026-12-06-h200-emulated-winograd, ncu per kernel, ResNet-18 b1):
    33.6 us a layer by Winograd against 29.8 direct; the H200 measured 21.3 against 23.6."""
    mod, _ = conv_module(n=1, c=512, size=(7, 7), k=512)
    on_h100, (decision,) = winograd_kernels(mod, H100)
    assert on_h100 == ["fused_conv2d_add_relu"] and not decision.fused
    _, (on_h200,) = winograd_kernels(mod, H200)
    # only the GEMM's bytes tell the two apart: the same tile plans, the same transforms' floor
    assert decision.figures["gemm_us"] > 1.3 * on_h200.figures["gemm_us"]
    assert decision.figures["data_transform_us"] == on_h200.figures["data_transform_us"]


def test_a_three_channel_layer_stays_direct():
    """3 input channels: Winograd saves little (K = 3) and writes a 36-plane product 21x the input
    (VGG-11 b32 with it measured 5.82 ms against 5.12 without, res4)."""
    mod, _ = conv_module(n=32, c=3, size=(224, 224), k=64)
    kernels, (decision,) = winograd_kernels(mod, H200)
    assert kernels == ["fused_conv2d_add_relu"] and not decision.fused


def test_a_conv_without_a_tile_model_is_costed_at_the_peak():
    """Without the templates' planner both ways fall back to their FLOPs at the peak (and their
    bytes): the decision says so rather than guessing a tile."""
    shape = WinogradShape(32, 64, 64, 56, 56, (1, 1, 1, 1), 4)
    profile = load_profile(H200)
    planned = WinogradCostModel(profile, hw.target(H200), kernel_plan).cost(shape)
    bare = WinogradCostModel(profile, hw.target(H200)).cost(shape)
    assert planned.figures()["tile_model"] and not bare.figures()["tile_model"]
    assert "no tile model" in bare.describe() and "no tile model" not in planned.describe()
    assert bare.direct.modelled_s == pytest.approx(shape.direct_flops() / profile.peak_fp32_flop_per_s)


@pytest.mark.parametrize("shape", [WinogradShape(1, 64, 64, 56, 56, (1, 1, 1, 1), 4),
                                   WinogradShape(32, 128, 128, 28, 28, (1, 1, 1, 1), 2),
                                   WinogradShape(8, 256, 512, 14, 14, (1, 1, 1, 1), 4)])
def test_the_cost_models_estimates_are_the_plans_of_scheduled_kernels(shape):
    """The cost model plans its kernels from the templates' tile ranking alone (a kernel it costs
    is never built as it is); those plans are the ones scheduling and checking the kernel makes."""
    target = hw.target(H200)
    for func in (direct_func(shape), gemm_func(shape)):
        planned = kernel_plan(func, target)
        assert planned is not None and planned.time_s > 0
        assert kernel_estimate(func, target) == planned


def test_a_filter_transformed_per_call_is_charged():
    shape = WinogradShape(1, 64, 64, 56, 56, (1, 1, 1, 1), 4)
    model = WinogradCostModel(load_profile(H200), hw.target(H200), kernel_plan)
    once, per_call = model.cost(shape), model.cost(shape, filter_per_call=True)
    assert "filter" in per_call.transforms and "filter" not in once.transforms
    assert per_call.winograd_s > once.winograd_s and per_call.direct_s == once.direct_s


@pytest.mark.parametrize("shape", [dict(stride=2), dict(groups=4), dict(kernel=1, pad=0)])
def test_other_convolutions_are_not_considered(shape):
    mod, _ = conv_module(n=32, c=64, size=(56, 56), k=64, **shape)
    kernels, decisions = winograd_kernels(mod, H200)
    assert decisions == [] and kernels == ["fused_conv2d_add_relu"]


def test_bad_knobs_are_one_line_errors():
    with pytest.raises(FusionHWError, match="winograd must be one of auto, always, off, got 'sometimes'"):
        hw.fusion_pass(H200, winograd="sometimes")
    with pytest.raises(FusionHWError, match=r"winograd_tile must be one of \(2, 4\), got 3"):
        hw.get_pipeline(hw.target(H200), winograd_tile=3)
    assert WINOGRAD_TILES == TILE_SIZES  # the policy checks the tiles the transforms have
    with pytest.raises(FusionHWError, match="winograd mode must be one of auto, always, off"):
        WinogradConv2d(load_profile(H200), mode="sometimes")
    with pytest.raises(FusionHWError, match="winograd tile must be one of"):
        WinogradConv2d(load_profile(H200), tile=6)


# ---- the transforms' schedules ------------------------------------------------------------------
@pytest.fixture(scope="module")
def transform_funcs():
    """{name: PrimFunc} of the data, filter and output transforms of a padded conv whose output
    tiles do not divide it, fused with its bias and ReLU, as the pipeline makes them."""
    mod, _ = conv_module(weight_param=True)
    target = hw.target(H200)
    fused = fused_module(mod, target, hw.fusion_pass(target, winograd="always"))
    return {name: f for name, f in prim_funcs(fused).items() if "winograd" in name}


@pytest.mark.parametrize("name", ["winograd_filter", "winograd_data", "fused_winograd_output_add_relu"])
def test_transform_schedules_compute_the_same(transform_funcs, name):
    func = transform_funcs[name]
    target = hw.target(H200)
    with target:
        planned = WinogradTransform().schedule_best(func, target)
    assert planned is not None
    assert_schedule_preserves_numerics(func, planned[2])


def test_transforms_whose_threads_divide_channels_times_tiles_are_scheduled():
    """Batch 2, 128 output channels of 9 tiles each: the block's 128 threads divide channels x
    tiles, and computed at the fused thread loop the first pass's bindings are not quasi-affine
    (when the passes were reductions, decomposing the first one there failed, and the output
    transform fell to dlight's GeneralReduction). The rule takes every transform, and each computes
    what its PrimFunc does."""
    mod, _ = conv_module(n=2, k=128, size=(12, 12), weight_param=True)
    target = hw.target(H200)
    fused = prim_funcs(fused_module(mod, target, hw.fusion_pass(target, winograd="always")))
    transforms = {name: f for name, f in fused.items() if "winograd" in name}
    assert sorted(transforms) == ["fused_winograd_output_add_relu", "winograd_data", "winograd_filter"]
    for name, func in transforms.items():
        with target:
            planned = WinogradTransform().schedule_best(func, target)
        assert planned is not None, name
        assert_schedule_preserves_numerics(func, planned[2])


def test_the_transforms_are_window_reductions_to_the_policy():
    """Each transform's TE writes an output's window out as one sum (no reduction loop: it lowers in
    about half the time); the rewrite gives the fusion pattern and kind that the loop form had.
    Before: conv2d + bias + ReLU. Expected: the filter and data transforms and the GEMM as kernels
    of their own, and the bias and ReLU an epilogue of the output transform's window sum (rule
    "epilogue"; as an element-wise anchor it would be a "reduction-epilogue"; inferred from the TIR,
    the data transform's pattern would be injective)."""
    mod, _ = conv_module(weight_param=True)
    target = hw.target(H200)
    fuse = hw.fusion_pass(target, winograd="always")
    assert kernel_names(fused_module(mod, target, fuse)) == [
        "winograd_filter", "winograd_data", "matmul", "fused_winograd_output_add_relu"]
    epilogues = [(d.rule, d.producer, d.consumer) for d in fuse.report.decisions if d.fused and d.rule != WINOGRAD]
    assert epilogues == [("epilogue", "winograd_output", "add"), ("epilogue", "winograd_output+add", "relu")]
    rewritten = WinogradConv2d(load_profile(H200), mode="always")(mod)
    patterns = {gv.name_hint: (int(f.attrs["op_pattern"]), [int(e) for e in f.attrs[WINDOW_ATTR]])
                for gv, f in rewritten.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert patterns == {"winograd_filter": (COMM_REDUCE, [3]), "winograd_data": (OUT_EWISE_FUSABLE, [6]),
                        "winograd_output": (OUT_EWISE_FUSABLE, [6])}


def test_transform_kernels_build_without_spills_for_sm90(transform_funcs):
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    target = hw.target(H200)
    for name, func in transform_funcs.items():
        with target:
            _, tile, sch = WinogradTransform().schedule_best(func, target)
            ex = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                             target=target)
        kernel = ptxas_kernels(ex.mod.imports[0].inspect_source())["main_kernel"]
        assert kernel.spill_store_bytes == 0 and kernel.stack_frame_bytes == 0, name
        assert kernel.threads_per_block == tile.threads and kernel.shared_bytes == 0, name


def test_exact_tiles_store_rows_as_vectors():
    """A 16x16 output (four 4x4 tiles a side): the output transform stores each tile row as one
    float4 (and computes what its PrimFunc computes); the overhanging 13x11 output stays scalar."""
    mod, _ = conv_module(size=(16, 16))
    target = hw.target(H200)
    fused = prim_funcs(fused_module(mod, target, hw.fusion_pass(target, winograd="always")))
    func = fused["fused_winograd_output_add_relu"]
    with target:
        _, tile, sch = WinogradTransform().schedule_best(func, target)
        ex = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target=target)
    assert tile.vector_stores and "rows stored as vectors" in tile.summary()
    assert_schedule_preserves_numerics(func, sch)
    source = ex.mod.imports[0].inspect_source()
    assert len(re.findall(r"^\s*\*\(float4\*\)\(\w+ \+ .*\) = \w+;$", source, re.M)) == 4  # the tile's 4 rows
    mod, _ = conv_module()
    overhang = prim_funcs(fused_module(mod, target, hw.fusion_pass(target, winograd="always")))
    with target:
        _, tile, _ = WinogradTransform().schedule_best(overhang["fused_winograd_output_add_relu"], target)
    assert not tile.vector_stores


def test_a_lifted_filter_is_transformed_with_the_weights():
    """Weights lifted at import (main_transform_params, as the CLI and bundles import): the filter
    transform moves there, main reads the transformed filter, and the result is the direct one's."""
    mod, (x, w) = conv_module(weight_param=True)
    main = mod["main"].with_attr("num_input", 1)
    mod = relax.transform.LiftTransformParams()(tvm.IRModule({"main": main}))

    def run(pipeline):
        ex = tvm.compile(mod, target=LLVM, relax_pipeline=pipeline)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        params = vm["main_transform_params"]([tvm.runtime.tensor(w)])
        return vm["main"](tvm.runtime.tensor(x), *params).numpy(), ex

    ours, ex = run(hw.get_pipeline(LLVM, profile=H200, winograd="always"))
    direct, _ = run(hw.get_pipeline(LLVM, profile=H200, winograd="off"))
    assert np.linalg.norm(ours - direct) / np.linalg.norm(direct) < 1e-5
    rewritten = WinogradConv2d(load_profile(H200), mode="always")(mod)
    assert "winograd_filter" not in rewritten["main"].script()
    assert "winograd_filter" in rewritten["main_transform_params"].script()
    assert [tuple(int(d) for d in p.ty.shape) for p in rewritten["main"].params[1:]] == [(36, 24, 16)]


def test_a_filter_read_twice_stays_in_main():
    """A weight two convolutions read is not replaced by one convolution's transform."""
    rng = np.random.default_rng(1)
    x_var = relax.Var("x", relax.TensorType((2, 8, 12, 12), "float32"))
    w_var = relax.Var("w", relax.TensorType((8, 8, 3, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x_var, w_var], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x_var, w_var, padding=1))
            y = bb.emit(relax.op.nn.conv2d(relax.op.nn.relu(y), w_var, padding=1))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = relax.transform.LiftTransformParams()(bb.get())
    rewritten = WinogradConv2d(load_profile(H200), mode="always")(mod)
    assert rewritten["main"].script().count("winograd_filter") == 2
    x, w = rng.standard_normal((2, 8, 12, 12)).astype("float32"), rng.standard_normal((8, 8, 3, 3)).astype("float32")
    results = []
    for mode in ("always", "off"):
        ex = tvm.compile(mod, target=LLVM, relax_pipeline=hw.get_pipeline(LLVM, profile=H200, winograd=mode))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(x), *vm["main_transform_params"]([tvm.runtime.tensor(w)])).numpy())
    assert np.linalg.norm(results[0] - results[1]) / np.linalg.norm(results[1]) < 1e-5


def _calibration_script():
    return load_script(BENCH / "winograd_calibration.py", "winograd_calibration")


def test_the_calibration_picks_memory_bound_gemms(monkeypatch, tmp_path):
    """bench/winograd_calibration.py's ``gemm_streaming`` rows: a Winograd GEMM whose FLOPs per byte
    are under a quarter of the ridge (512 channels, 4 tiles: 2 FLOP/B) is one, a compute-bound one
    (128 tiles: 43 FLOP/B) is not; ``--keys`` rewrites only that list of an existing file."""
    script = _calibration_script()
    assert script._batched_gemm_flops([[36, 512, 512], [36, 512, 4], [36, 512, 4]]) == 2 * 36 * 512 * 512 * 4
    assert script._batched_gemm_flops([[1, 64, 56, 56], [64, 64, 3, 3], [1, 64, 56, 56]]) == 0

    def gemm(tiles):
        shapes = [[36, 512, 512], [36, 512, tiles], [36, 512, tiles]]
        return (10.0, sum(int(np.prod(s)) for s in shapes) * 4, False, script._batched_gemm_flops(shapes))

    kernels = {("m", 1): {"matmul": gemm(4)}, ("m", 32): {"matmul": gemm(128)}}
    monkeypatch.setattr(script, "_kernels", lambda model, batch, knobs, profile: kernels[(model, batch)])
    results = [{"model": "m", "batch": b, "kernels": {"hw": {"all": [{"name": "matmul", "us_per_call": 15.0}]}}}
               for b in (1, 32)]
    found = script.rows(results, H200)
    assert [row[0] for row in found["gemm_streaming"]] == ["m b1 matmul"]
    assert len(found["fused"]) == 2
    kept = {"source": "earlier", "fused": [["kept", 1.0, 1.0]], "apart": [["kept", 1.0, 1.0]],
            "streaming": [["kept", 1, 1.0, 4.8e12]], "smallest": [["kept", 1.0]],
            "gemm_streaming": [["replaced", 1, 1.0, 4.8e12]]}
    out = tmp_path / "cal.json"
    out.write_text(json.dumps(kept))
    run = tmp_path / "results.json"
    run.write_text(json.dumps(results))
    assert script.main([str(run), "--write", str(out), "--keys", "gemm_streaming", "--batches", "1"]) == 0
    written = json.loads(out.read_text())
    assert written["source"] == "earlier" and written["fused"] == [["kept", 1.0, 1.0]]
    assert [row[0] for row in written["gemm_streaming"]] == ["m b1 matmul"]
