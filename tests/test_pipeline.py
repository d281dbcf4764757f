"""The hardware-aware pipeline end to end: same numbers as stock TVM, builds for every GPU arch."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.models import list_models

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
    """Same passes as TVM's CUDA pipeline, in the same order: SafePower before LegalizeOps,
    FuseOps swapped, dead blocks dropped after FuseTIR, and the schedule with the plugin's
    templates first."""
    from tvm.relax.backend.cuda import pipeline as cuda

    target = hw.target("nvidia-h200")
    stock = [p.info.name for p in cuda.legalize_passes(target)]
    fuse = hw.fusion_pass(target)
    for schedules in (True, False):
        ours = [p.info.name for p in hw.pipeline.legalize_passes(target, fuse, schedules)]
        expected = []
        for name in stock:
            if name == "LegalizeOps":
                expected.append("SafePower")
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
