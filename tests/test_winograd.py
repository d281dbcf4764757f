"""Tests for Winograd convolution: the rewrite (tvm_fusion_hw/winograd_conv.py), its transforms and
their schedule rule (schedules/winograd). CPU only; checked:
- the matrices: ``A^T [(G g) * (B^T d)]`` is the 3-tap correlation of ``d`` with ``g`` (numpy's);
- whole convolutions (padding, sizes that tiles do not divide, a filter that is a parameter, F(2x2)
  and F(4x4)) built on the CPU through the pipeline match TVM's direct convolution;
- the profile decides: a 64-channel layer at batch 32 is Winograd on the H200 (ridge 14 FLOP/B) and
  direct on the RTX 3060 (ridge 35): Before / Expected kernels under both; a batch-1 late layer
  stays direct (two added kernels cost more than the FLOPs saved); strided, grouped and 1x1
  convolutions are never considered;
- the transform schedules compute what their PrimFuncs compute, and build for sm_90 without spills.
"""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.fusion.policy import WINOGRAD_TILES
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.hardware.profile import load_profile
from tvm_fusion_hw.pipeline import fused_module, kernel_names
from tvm_fusion_hw.schedules.winograd.rule import WinogradTransform
from tvm_fusion_hw.schedules.winograd.transforms import TILE_SIZES, matrices
from tvm_fusion_hw.winograd_conv import WINOGRAD, WinogradConv2d
from tir_checks import LLVM, assert_schedule_preserves_numerics, prim_funcs, ptxas_kernels

H200, RTX3060 = "nvidia-h200", "nvidia-rtx-3060"


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
    """F(4x4) saves 0.375 x 64 = 24 FLOP per byte it adds: above the H200's ridge, below the RTX 3060's."""
    mod, _ = conv_module(n=32, c=64, size=(56, 56), k=64)
    on_h200, (decision,) = winograd_kernels(mod, H200)
    assert on_h200 == ["winograd_data", "matmul", "fused_winograd_output_add_relu"]
    assert decision.fused and decision.figures["saved_flop_per_added_byte"] == 24.0
    assert decision.consumer == "F(4x4,3x3)"
    on_3060, (decision,) = winograd_kernels(mod, RTX3060)
    assert on_3060 == ["fused_conv2d_add_relu"]
    assert not decision.fused and "ridge 35" in decision.reason


def test_a_late_layer_at_batch_1_stays_direct():
    """7x7 x 512: 2.3 us of FLOPs saved at peak against two kernels' floor (4.5 us each)."""
    mod, _ = conv_module(n=1, c=512, size=(7, 7), k=512)
    kernels, (decision,) = winograd_kernels(mod, H200)
    assert kernels == ["fused_conv2d_add_relu"] and not decision.fused
    assert decision.figures["saved_us_at_peak"] < 2 * decision.figures["kernel_floor_us"]


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
