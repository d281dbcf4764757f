"""Tests for tvm_fusion_hw.models: the ONNX builders (CPU only).

Checked: every model builds and passes the full ONNX checker; builds are byte-deterministic per
seed; the batch is a parameter; unknown names raise FusionHWError; parameter counts equal the
papers'; outputs of the full models are finite and O(1); micro-graphs (and the small full
models) give the same numbers through TVM (llvm) as through ``onnx.reference``.
The whole file takes about 35 s on one core (ResNet-50 through TVM is 10 s of it).
"""

import functools

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.models import (MODELS, build, example_inputs, input_shape, input_shapes, list_models, num_params)

FULL = ["mobilenet_v2", "resnet50", "squeezenet1_1", "bert_encoder_layer"]
MICRO = ["relu_add_mul", "eltwise5", "conv_relu_pool", "dw_pw", "layernorm_residual"]


@functools.lru_cache(maxsize=None)
def _built(name, batch=1, seed=0):
    """Builds are deterministic, so tests share them (ResNet-50 takes ~1 s to draw)."""
    return build(name, batch=batch, seed=seed)


@functools.lru_cache(maxsize=None)
def _bytes(name, batch=1, seed=0):
    return _built(name, batch, seed).SerializeToString()


def _run_tvm(model, feeds):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(model, keep_params_in_input=False)  # weights become constants
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(feeds[vi.name]) for vi in model.graph.input if vi.name in feeds]
    return vm["main"](*args).numpy()


def test_list_models_names():
    assert list_models() == FULL + MICRO
    assert set(MODELS) == set(FULL + MICRO)


@pytest.mark.parametrize("name", FULL + MICRO)
@pytest.mark.parametrize("batch", [1, 2])
def test_builds_and_passes_checker(name, batch):
    model = _built(name, batch)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    assert model.graph.input[0].name == "input"
    assert [o.name for o in model.graph.output] == ["output"]


@pytest.mark.parametrize("name", FULL + MICRO)
def test_batch_is_a_parameter(name):
    for batch in (1, 2):
        model = _built(name, batch)
        shapes = input_shapes(model)
        assert shapes["input"] == input_shape(name, batch)
        assert all(s[0] == batch for s in shapes.values())
        out = model.graph.output[0].type.tensor_type.shape.dim
        assert out[0].dim_value == batch


@pytest.mark.parametrize("name", FULL + MICRO)
def test_deterministic_per_seed(name):
    assert _bytes(name) == build(name, batch=1, seed=0).SerializeToString()
    if name == "eltwise5":  # no weights: the seed has nothing to change
        return
    assert _bytes(name, 1, 0) != _bytes(name, 1, 1)


def test_unknown_name_lists_known_models():
    with pytest.raises(FusionHWError) as err:
        build("resnet51")
    for name in FULL + MICRO:
        assert name in str(err.value)
    with pytest.raises(FusionHWError):
        input_shape("resnet51", 1)
    with pytest.raises(FusionHWError):
        build("resnet50", batch=0)


@pytest.mark.parametrize("name, params", [
    ("mobilenet_v2", 3_504_872),        # torchvision mobilenet_v2
    ("resnet50", 25_557_032),           # torchvision resnet50
    ("squeezenet1_1", 1_235_496),       # torchvision squeezenet1_1
    ("bert_encoder_layer", 7_087_872),  # Hugging Face BertLayer, bert-base
])
def test_parameter_counts_match_papers(name, params):
    if name in ("mobilenet_v2", "resnet50"):
        # The default model adds a bias to every conv before its BN; without it, the paper's count.
        assert num_params(build(name, conv_bias=False)) == params
        assert num_params(_built(name)) > params
    else:
        assert num_params(_built(name)) == params


@pytest.mark.parametrize("name", FULL)
def test_full_model_outputs_are_sane(name):
    model = _built(name)
    out = ReferenceEvaluator(model).run(None, example_inputs(model, seed=1))[0]
    assert np.isfinite(out).all()
    assert 0.1 < out.std() < 100.0, out.std()  # neither collapsed nor exploding
    # Different inputs give different outputs (the net did not saturate to a constant).
    other = ReferenceEvaluator(model).run(None, example_inputs(model, seed=2))[0]
    assert np.abs(out - other).max() > 1e-2


def test_micro_size_keyword():
    model = build("conv_relu_pool", batch=3, size=(8, 16, 16), out_channels=4)
    assert input_shapes(model) == {"input": (3, 8, 16, 16)}
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [3, 4, 8, 8]
    model = build("eltwise5", batch=2, size=(5, 7))
    assert input_shapes(model) == {"input": (2, 5, 7), "skip": (2, 5, 7), "gate": (2, 5, 7)}


# Every model once at batch 1, and one micro-graph at batch 2.
_TVM_CASES = [(n, 1) for n in MICRO + FULL] + [("dw_pw", 2)]


@pytest.mark.parametrize("name, batch", _TVM_CASES)
def test_tvm_llvm_matches_onnx_reference(name, batch):
    model = _built(name, batch)
    feeds = example_inputs(model, seed=1)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = _run_tvm(model, feeds)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
