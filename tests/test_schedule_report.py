"""tvm_fusion_hw.schedule_report: every kernel's schedule rule, in call order, as get_pipeline picks it."""

import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.pipeline import fused_module, kernel_names
from tvm_fusion_hw.schedule_report import explain_schedules
from tvm_fusion_hw.schedules import ImplicitGemm


def test_bert_kernels_name_their_rules_and_tiles():
    target = hw.target("nvidia-h200")
    mod = import_onnx(build("bert_encoder_layer", batch=1))
    choices = explain_schedules(mod, target)
    fused = fused_module(mod, target, hw.fusion_pass(target))
    assert [c.kernel for c in choices] == list(dict.fromkeys(kernel_names(fused)))
    rules = {c.kernel: c.rule for c in choices}
    assert rules["fused_matmul_add"] == "ImplicitGemm" and rules["layer_norm"] == "RowReduction"
    gemm = next(c for c in choices if c.kernel == "fused_matmul_add")
    assert "accumulators" in gemm.detail and "model" in gemm.detail and str(gemm).startswith("fused_matmul_add: ")


def test_rules_argument_is_what_get_pipeline_takes():
    target = hw.target("nvidia-h200")
    mod = import_onnx(build("eltwise5", batch=32))
    assert [c.rule for c in explain_schedules(mod, target)] == ["VectorizedElementwise"]
    assert [c.rule for c in explain_schedules(mod, target, rules=[ImplicitGemm()])] == ["dlight Fallback"]


def test_explained_kernels_are_the_built_ones():
    import re

    import tvm

    from tir_checks import cuda_source

    target = hw.target("nvidia-h200")
    mod = import_onnx(build("bert_encoder_layer", batch=1))
    source = cuda_source(tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target)))
    built = set(re.findall(r"void (?:__launch_bounds__\(\d+\) )?(\w+?)_kernel(?:_\d+)?\(", source))
    assert built == {c.kernel for c in explain_schedules(mod, target)}


def test_logged_tile_is_the_one_planning_it_again_gives():
    """The report reads the tile from the schedule log (no second planning): it must be the tile
    the template plans for that kernel when asked alone, and dlight's kernels have none."""
    target = hw.target("nvidia-h200")
    mod = import_onnx(build("bert_encoder_layer", batch=1))
    fused = fused_module(mod, target, hw.fusion_pass(target))
    choices = {c.kernel: c for c in explain_schedules(mod, target)}
    gemms = [name for name, c in choices.items() if c.rule == "ImplicitGemm"]
    assert len(gemms) >= 3
    for name in gemms:
        with target:
            _, tile = ImplicitGemm().plan(fused[name], target)
        assert choices[name].detail == tile.summary()
    dlight = [c for c in choices.values() if c.rule.startswith("dlight")]
    assert dlight and all(c.detail == "" for c in dlight)
