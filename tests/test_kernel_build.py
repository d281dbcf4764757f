"""The pipeline's own build of the module's kernels (``tvm_fusion_hw.kernel_build``): the same code as
``tvm.compile``'s build, each template kernel lowered once, the module's calls linked to it."""

import re

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import tvm_fusion_hw as hw
from tvm_fusion_hw.guarded_schedule import dlight_rules
from tvm_fusion_hw.kernel_build import BuildKernels, LoweredStore, lower

from tir_checks import row_sum, zoo_module

LLVM = tvm.target.Target("llvm")


def _run(ex, weights, inputs):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs], *weights)
    return (out[0] if isinstance(out, (list, tuple)) else out).numpy()


def _no_pipeline():
    return tvm.transform.Sequential([])


def test_linked_kernels_compute_what_tvms_build_of_them_computes(tmp_path):
    """On the CPU (the same passes and linking as for a GPU): the module after BuildKernels holds no
    PrimFunc, one external library more, and runs, also exported and loaded back, to the outputs
    of ``tvm.compile`` building the same PrimFuncs itself."""
    mod, weights, inputs = zoo_module("conv_relu_pool")
    scheduled = hw.get_pipeline(LLVM, profile="nvidia-h200")(mod)
    kernels = [gv.name_hint for gv, f in scheduled.functions_items() if isinstance(f, tirx.PrimFunc)]
    assert kernels
    linked = BuildKernels(LLVM)(scheduled)
    assert not [f for f in linked.functions.values() if isinstance(f, tirx.PrimFunc)]
    assert len(linked.get_attr("external_mods")) == 1
    expected = _run(tvm.compile(scheduled, target=LLVM, relax_pipeline=_no_pipeline()), weights, inputs)
    ex = tvm.compile(linked, target=LLVM, relax_pipeline=_no_pipeline())
    np.testing.assert_array_equal(_run(ex, weights, inputs), expected)
    ex.export_library(str(tmp_path / "linked.so"))
    np.testing.assert_array_equal(_run(tvm.runtime.load_module(str(tmp_path / "linked.so")), weights, inputs),
                                  expected)


def _cuda_kernels(ex) -> list:
    """The ``__global__`` functions of an executable's CUDA module, sorted."""
    stack, sources = [ex.mod], []
    while stack:
        module = stack.pop()
        if module.kind == "cuda":
            sources.append(str(module.inspect_source("")))
        stack.extend(module.imports)
    assert len(sources) == 1
    return sorted(re.split(r'(?=extern "C" __global__)', sources[0])[1:])


@pytest.mark.parametrize("model", ["mobilenet_v2", "layernorm_residual"])
def test_the_cuda_code_is_tvms_and_template_kernels_are_lowered_once(model):
    """For the H200: the same CUDA kernels, byte for byte, as ``tvm.compile`` building the scheduled
    module itself; each template kernel keeps the lowering its check made, dlight's are lowered anew."""
    mod, _, _ = zoo_module(model)
    target = hw.target("nvidia-h200")
    kernels = {}
    for build_kernels in (True, False):
        pipeline = hw.get_pipeline(target, build_kernels=build_kernels)
        with hw.pass_context(target):
            kernels[build_kernels] = _cuda_kernels(tvm.compile(mod, target=target, relax_pipeline=pipeline))
        if build_kernels:
            rules = pipeline.schedule_pass.log.rules
            dlight = {type(r).__name__ for r in dlight_rules()}
            templates = sorted(k for k, rule in rules.items() if rule not in dlight)
            assert templates and sorted(pipeline.build_pass.reused) == templates
    assert kernels[True] == kernels[False]


def test_a_kernel_changed_since_its_check_is_lowered_again():
    """The store gives a lowering back for the same name, target, PassContext and IR only."""
    store, target = LoweredStore(), hw.target("nvidia-h200")
    func = tvm.s_tir.dlight.gpu.Fallback().apply(row_sum, target, False)
    func = (func[0] if isinstance(func, list) else func).mod["main"]
    store.remember({"row_sum": func}, target, lower({"row_sum": func}, target))
    assert store.take("row_sum", func, target) is not None
    assert store.take("other", func, target) is None
    assert store.take("row_sum", func.with_attr("changed", 1), target) is None
    assert store.take("row_sum", func, hw.target("nvidia-a100-80gb")) is None
    with tvm.transform.PassContext(config={"tirx.disable_cse_tir": True}):
        assert store.take("row_sum", func, target) is None
