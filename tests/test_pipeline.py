"""The hardware-aware pipeline end to end: same numbers as stock TVM, builds for every GPU arch."""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.fusion.memo import ExactIRMemo
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.models import build, list_models
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules import template_planners

MICRO = ["relu_add_mul", "eltwise5", "conv_relu_pool", "dw_pw", "layernorm_residual"]
FULL = ["mobilenet_v2", "resnet50", "squeezenet1_1", "bert_encoder_layer"]


def relative_error(ours, ref):
    return float(np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30))


def assert_same_outputs(ours, stock):
    assert len(ours) == len(stock)
    for a, b in zip(ours, stock):
        assert a.shape == b.shape
        assert np.isfinite(a).all()
        assert relative_error(a, b) < 1e-5, relative_error(a, b)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_zoo_is_covered():
    assert sorted(MICRO + FULL) == sorted(list_models())


@pytest.mark.parametrize("model", FULL + MICRO)
def test_h200_decisions_match_stock_numerics(runner, model):
    assert_same_outputs(runner.outputs(model, "nvidia-h200"), runner.outputs(model, None))


@pytest.mark.parametrize("profile", ["nvidia-rtx-3060", "nvidia-jetson-agx-orin", "amd-mi300x"])
@pytest.mark.parametrize("model", ["conv_relu_pool", "dw_pw", "eltwise5"])
def test_other_profiles_match_stock_numerics(runner, model, profile):
    assert_same_outputs(runner.outputs(model, profile), runner.outputs(model, None))


def test_pipeline_differs_from_stock_only_in_fusion_and_schedules():
    """Same passes as TVM's CUDA pipeline, in the same order: the graph rewrites the fusion pass's
    knobs ask for (Winograd; split slices with layout prologues) and SafePower before LegalizeOps,
    FuseOps swapped, dead blocks dropped after FuseTIR, and the schedule with the plugin's
    templates first."""
    from tvm.relax.backend.cuda import pipeline as cuda

    target = hw.target("nvidia-h200")
    stock = [p.info.name for p in cuda.legalize_passes(target)]
    assert hw.pipeline.winograd_pass(hw.fusion_pass(target, winograd="off")) is None
    cases = ((hw.fusion_pass(target), True, ["WinogradConv2d", "SplitsIntoSlices"]),
             (hw.fusion_pass(target, winograd="off", layout_prologues=False), False, []),
             (hw.fusion_pass(target, layout_prologues=False), True, ["WinogradConv2d"]))
    for fuse, schedules, rewrites in cases:
        passes = hw.pipeline.rewrite_passes(fuse)
        assert [p.info.name for p in passes] == rewrites
        ours = [p.info.name for p in hw.pipeline.legalize_passes(target, fuse, schedules, rewrites=passes)]
        expected = []
        for name in stock:
            if name == "LegalizeOps":
                expected += rewrites + ["SafePower"]
            renamed = {"FuseOps": "HardwareAwareFuseOps", "ApplyDefaultSchedule": "GuardedSchedule" if schedules
                       else "ApplyDefaultSchedule"}
            expected.append(renamed.get(name, name))
            if name == "FuseTIR":
                expected.append("EliminateDeadBlocks")
        assert ours == expected


def top_level_host_loops(mod):
    """(function, loop) pairs of GPU PrimFuncs whose top-level loops no thread binds: such
    loops run on the host over device memory."""
    import re

    found = []
    for gvar, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            for line in func.script().splitlines():
                if re.match(r"^    for ", line) and "thread_binding" not in line:
                    found.append((gvar.name_hint, line.strip()))
    return found


@pytest.mark.parametrize("profile", ["nvidia-h200", "amd-mi300x"])
@pytest.mark.parametrize("model", FULL + MICRO)
def test_every_scheduled_loop_runs_on_the_gpu(runner, model, profile):
    """The bug this guards: dlight left batch_norm's dead outputs in fused epilogues as host loops,
    which built fine and segfaulted on the H200."""
    from tvm_fusion_hw.pipeline import fused_module, schedule_pass

    target = hw.target(profile)
    mod, _, _ = runner.module(model)
    fused = fused_module(relax.transform.LiftTransformParams()(mod), target, hw.fusion_pass(target))
    with target:
        scheduled = schedule_pass()(fused)
    assert top_level_host_loops(scheduled) == []


ARCHS = {
    "nvidia-a100-80gb": "sm_80",
    "nvidia-rtx-4090": "sm_89",
    "nvidia-h200": "sm_90",
    "amd-mi250x": "gfx90a",
    "amd-mi300x": "gfx942",
}


@pytest.mark.slow
@pytest.mark.parametrize("profile", sorted(ARCHS))
@pytest.mark.parametrize("model", ["mobilenet_v2", "conv_relu_pool", "dw_pw", "layernorm_residual"])
def test_builds_for_every_gpu_arch(runner, tmp_path, profile, model):
    target = hw.target(profile)
    arch = target.attrs.get("arch") or target.attrs.get("mcpu")
    assert str(arch) == ARCHS[profile]
    if target.kind.name == "rocm" and not toolchain.have_rocm_toolchain():
        pytest.skip("ROCm toolchain missing: run scripts/install-system-deps.sh")
    mod, _, _ = runner.module(model)
    ex = tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target))
    path = tmp_path / f"{model}.so"
    ex.export_library(str(path))
    assert path.stat().st_size > 0


# ---- the templates' plans, remembered ------------------------------------------------------------
class ForgetfulMemo(ExactIRMemo):
    """A memo that never remembers: every plan is asked for again."""

    def lookup(self, key, funcs):
        self.misses += 1
        return False, None


def _fuse(model, profile, **kwargs):
    """(the fusion pass, the fused module) of zoo ``model`` at batch 1 on ``profile``."""
    target = hw.target(profile)
    mod = relax.transform.LiftTransformParams()(import_onnx(build(model, batch=1), keep_params_in_input=True))
    fuse = hw.HardwareAwareFuseOps(target, planners=template_planners(), **kwargs)
    return fuse, fused_module(mod, target, fuse)


def test_remembered_plans_decide_as_plans_asked_again():
    """MobileNetV2's depthwise and pointwise convs are each in two complex pairs: their part plans
    are asked once and remembered, and the decisions (reasons, figures, groups) and the fused
    module are those of a pass that asks every time."""
    remembered, fused = _fuse("mobilenet_v2", "nvidia-h200")
    asked, fused_again = _fuse("mobilenet_v2", "nvidia-h200", plan_memo=ForgetfulMemo())
    assert remembered.plan_memo.hits > 0 and asked.plan_memo.misses > remembered.plan_memo.misses
    assert remembered.report == asked.report
    assert fused.script() == fused_again.script()


def test_a_plan_memo_shared_by_two_profiles_keeps_them_apart():
    """Plans are remembered per target: a memo that planned for the H200 gives the RTX 3060 its
    own plans (its limits and tiles differ)."""
    memo = ExactIRMemo()
    h200, _ = _fuse("dw_pw", "nvidia-h200", plan_memo=memo)
    shared, _ = _fuse("dw_pw", "nvidia-rtx-3060", plan_memo=memo)
    fresh, _ = _fuse("dw_pw", "nvidia-rtx-3060")
    assert memo.hits == 0 and shared.report == fresh.report
    (pair_h200,), (pair_rtx,) = h200.report.find("complex-pair"), shared.report.find("complex-pair")
    assert pair_h200.figures != pair_rtx.figures


@T.prim_func(private=True, s_tir=True)
def _add_one(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.sblock("e"):
            vi = T.axis.spatial(64, i)
            b[vi] = a[vi] + T.float32(1)


@T.prim_func(private=True, s_tir=True)
def _add_one_renamed(x: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.sblock("e"):
            vi = T.axis.spatial(64, i)
            b[vi] = x[vi] + T.float32(1)


def test_the_exact_ir_memo_tells_apart_what_structural_equality_does_not():
    """Same structure, another buffer name: two entries; the same IR under another PassContext or
    another key: asked again; the same IR again: remembered."""
    assert tvm_ffi.structural_equal(_add_one, _add_one_renamed)
    memo, calls = ExactIRMemo(), []

    def answer(func, key="k"):
        return memo.get(key, (func,), lambda: calls.append(func) or len(calls))

    assert answer(_add_one) == 1 and answer(_add_one_renamed) == 2 and answer(_add_one) == 1
    with tvm.transform.PassContext(config={"tirx.use_async_copy": True}):
        assert answer(_add_one) == 3
    assert answer(_add_one, "another key") == 4
    assert len(memo) == 4 and memo.hits == 1
