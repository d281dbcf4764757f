"""Every corpus model builds the README's way for sm_90 and gfx942, and its llvm build with the
plugin's fusion matches stock TVM's and onnxruntime's (a reference no one here wrote).

Batch 1, seeded weights (``models.build("corpus:NAME")``). The GPU builds exercise the schedule
templates and the never-break fallback without a GPU; what they compute is checked on the H200
through the bundle (bench/results). For the H200 no conv kernel is left to dlight. Marked slow: the
whole corpus is about ten minutes on 2 cores.
"""

import warnings

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback.kernel_launches import device_modules
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build, corpus

NAMES = corpus.names()
LLVM = tvm.target.Target({"kind": "llvm"})


def model_of(name):
    return build(f"corpus:{name}", batch=1)


def _feeds(model, inits):
    rng = np.random.default_rng(0)
    out = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value for d in tensor.shape.dim]
        if tensor.elem_type == 7:  # int64: token ids
            out[value.name] = rng.integers(0, 1000, shape, dtype=np.int64)
        else:
            out[value.name] = rng.standard_normal(shape, dtype=np.float32)
    return out


def run_vm(ex, feeds):
    result = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    return [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]


def rel_l2(ref, out):
    num = sum(float(np.sum((a.astype(np.float64) - b) ** 2)) for a, b in zip(ref, out))
    den = sum(float(np.sum(a.astype(np.float64) ** 2)) for a in ref)
    return (num / max(den, 1e-30)) ** 0.5


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_llvm_matches_stock_and_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    model = model_of(name)
    feeds = _feeds(model, {t.name for t in model.graph.initializer})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = [np.asarray(o) for o in session.run(None, feeds)]
    mod = import_onnx(model, keep_params_in_input=False)
    ours = run_vm(tvm.compile(mod, target=LLVM, relax_pipeline=hw.get_pipeline(LLVM, profile="nvidia-h200")), feeds)
    stock = run_vm(tvm.compile(mod, target=LLVM), feeds)
    assert len(ours) == len(reference) and all(np.isfinite(o).all() for o in ours)
    assert rel_l2(stock, ours) <= 1e-5, "plugin's fusion against stock TVM"
    assert rel_l2(reference, ours) <= 1e-4, "plugin's fusion against onnxruntime"


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["nvidia-h200", "amd-mi300x"])
@pytest.mark.parametrize("name", NAMES)
def test_builds_for_the_gpu(name, profile):
    """The README's path: weights lifted, hw.pass_context, hw.get_pipeline. A template that fails
    falls back (a warning), never the build."""
    mod = relax.transform.LiftTransformParams()(import_onnx(model_of(name), keep_params_in_input=True))
    target = hw.target(profile)
    pipeline = hw.get_pipeline(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hw.pass_context(target):
            ex = tvm.compile(mod, target=target, relax_pipeline=pipeline)
    kinds = {"nvidia-h200": "cuda", "amd-mi300x": "rocm"}
    assert device_modules(ex, (kinds[profile], "hip"))
    rules = pipeline.schedule_pass.log.rules
    assert rules  # every kernel went through the guarded schedule
    if profile == "nvidia-h200":  # every conv on a template (squeeze-and-excitation FCs: RowReduction's GEMVs)
        templates = {type(r).__name__ for r in pipeline.schedule_pass.templates}
        assert not [(n, r) for n, r in rules.items() if "conv" in n and r not in templates]

