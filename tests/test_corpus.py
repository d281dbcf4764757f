"""The real-model corpus (models/corpus): stored graphs, the materializer, and the index's claims."""

import json
import lzma

import numpy as np
import onnx
import pytest

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.models import corpus
from tvm_fusion_hw.models.corpus import export

NAMES = corpus.names()
SMALL = "squeezenet1_0" if "squeezenet1_0" in NAMES else NAMES[0]  # few weights: cheap to materialize
FLOATS = export.FLOAT_TYPES


def _static(model):
    return {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(model.graph.input) + list(model.graph.output)}


def test_corpus_has_thirty_architectures_from_the_three_libraries():
    assert len(NAMES) >= 30
    assert {corpus.entry(n)["library"] for n in NAMES} == {"torchvision", "timm", "transformers"}
    for name in NAMES:
        e = corpus.entry(name)
        assert e["version"] and e["constructor"] and e["inputs"], name
        assert "tvm_import" in e and "onnxruntime" in e, f"{name}: not surveyed"


@pytest.mark.parametrize("name", NAMES)
def test_every_entry_has_a_small_stripped_graph_matching_the_index(name):
    path = corpus.graph_path(name)
    assert path.is_file()
    assert path.stat().st_size < 512 * 1024, "a stripped graph is structure only"
    model = corpus.load_stripped(name)
    e = corpus.entry(name)
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    assert [i.name for i in inputs] == [i["name"] for i in e["inputs"]]
    for vi, spec in zip(inputs, e["inputs"]):
        assert [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] == spec["shape"]
        assert onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name == spec["dtype"]
    assert vi.type.tensor_type.shape.dim[0].dim_param == corpus.BATCH_DIM
    stripped = corpus.stripped_initializers(model)
    assert len(stripped) == e["stripped_initializers"] > 0
    assert sum(int(np.prod(t.dims)) for t in stripped) == e["stripped_params"]
    for tensor in stripped:  # only large float weights lost their data; shape constants are intact
        assert tensor.data_type in FLOATS and np.prod(tensor.dims) >= export.MIN_STRIP, tensor.name
        assert not tensor.raw_data and set(json.loads(tensor.doc_string)) == {"mean", "std", "min", "max"}
    for tensor in model.graph.initializer:
        if tensor not in stripped:
            assert onnx.numpy_helper.to_array(tensor).size == int(np.prod(tensor.dims))


@pytest.mark.parametrize("name", NAMES)
def test_initializer_shapes_agree_with_the_graph(name):
    """Strict shape inference at batch 2 checks every weight's dims against the op that reads it."""
    model = corpus.load_stripped(name)
    corpus._fix_batch(model.graph.input, 2)  # pylint: disable=protected-access
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    out = inferred.graph.output[0].type.tensor_type.shape.dim
    assert out[0].dim_value in (0, 2)  # 2 where the batch propagates, unknown never contradicts


def test_materializer_is_deterministic_per_seed():
    one = corpus.load(SMALL, seed=0).SerializeToString()
    assert corpus.load(SMALL, seed=0).SerializeToString() == one
    other = corpus.load(SMALL, seed=1)
    assert other.SerializeToString() != one
    filled = {t.name: onnx.numpy_helper.to_array(t) for t in corpus.load(SMALL, seed=0).graph.initializer}
    for tensor in other.graph.initializer:  # every weight differs, not just one
        if tensor.name in {t.name for t in corpus.stripped_initializers(corpus.load_stripped(SMALL))}:
            assert not np.array_equal(onnx.numpy_helper.to_array(tensor), filled[tensor.name])


def test_filled_weights_follow_the_recorded_distribution():
    stripped = {t.name: json.loads(t.doc_string) for t in corpus.stripped_initializers(corpus.load_stripped(SMALL))}
    model = corpus.load(SMALL, seed=3)
    assert not corpus.stripped_initializers(model)
    for tensor in model.graph.initializer:
        array = onnx.numpy_helper.to_array(tensor)
        assert array.shape == tuple(tensor.dims) and np.isfinite(array).all()
        if tensor.name in stripped:
            stats = stripped[tensor.name]
            assert stats["min"] <= array.min() and array.max() <= stats["max"]
            assert abs(array.std() - stats["std"]) < 0.2 * stats["std"] + 1e-6, tensor.name


def test_batch_is_fixed_or_left_symbolic():
    name = SMALL
    assert all(dims[0] == 7 for dims in _static(corpus.load(name, batch=7)).values())
    assert all(dims[0] == corpus.BATCH_DIM for dims in _static(corpus.load(name, batch=None)).values())
    for bad in (0, -1, 2.0, "1"):
        with pytest.raises(FusionHWError):
            corpus.load(name, batch=bad)
    with pytest.raises(FusionHWError):
        corpus.load(name, batch=None, fold=True)
    with pytest.raises(FusionHWError, match="unknown corpus model"):
        corpus.load("no_such_model")


def test_example_inputs_follow_the_index():
    for name in NAMES:
        feeds = corpus.example_inputs(name, batch=3)
        for spec in corpus.entry(name)["inputs"]:
            assert feeds[spec["name"]].dtype == spec["dtype"]
            assert list(feeds[spec["name"]].shape) == [3 if d == "batch" else d for d in spec["shape"]]


def test_strip_keeps_shape_constants_and_masks():
    """export.strip_model on a hand-made graph: weights go, int shapes, small and structured tensors stay."""
    from onnx import TensorProto, helper, numpy_helper  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal(63).astype(np.float32), "small"),
             numpy_helper.from_array(np.triu(np.full((16, 16), -1e9, np.float32), 1), "mask")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"]),
             helper.make_node("Add", ["mask", "mask"], ["m"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 64]),
                               helper.make_tensor_value_info("m", TensorProto.FLOAT, [16, 16])], inits)
    model, summary = export.strip_model(helper.make_model(graph))
    assert summary["stripped_initializers"] == 1 and summary["stripped_params"] == 512
    kept = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name != "w"}
    for t in inits[1:]:
        np.testing.assert_array_equal(kept[t.name], numpy_helper.to_array(t))


@pytest.mark.parametrize("name", [SMALL, "resnet18", "mobilenet_v3_small", "bert", "gpt2"])
def test_materialized_model_checks_and_runs_finite(name):
    if name not in NAMES:
        pytest.skip(f"{name} not in the corpus")
    ort = pytest.importorskip("onnxruntime")
    model = corpus.load(name, batch=2)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for out in sess.run(None, corpus.example_inputs(name, batch=2)):
        assert out.shape[0] == 2 and np.isfinite(out).all()


def test_fold_changes_no_output():
    ort = pytest.importorskip("onnxruntime")
    name = "gpt2" if "gpt2" in NAMES else SMALL
    feeds = corpus.example_inputs(name, batch=1)
    plain, folded = corpus.load(name), corpus.load(name, fold=True)
    assert len(folded.graph.node) < len(plain.graph.node)
    assert not [n for n in folded.graph.node if n.op_type == "Shape"]
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
            for m in (plain, folded)]
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def _import_cases():
    for name in NAMES:
        e = corpus.entry(name)
        fold = e["tvm_import"] != "ok"
        if (e.get("tvm_import_folded") if fold else e["tvm_import"]) == "ok":
            yield pytest.param(name, fold, id=f"{name}{'-fold' if fold else ''}",
                               marks=[pytest.mark.slow] if e["stripped_params"] > 30_000_000 else [])


@pytest.mark.parametrize("name,fold", list(_import_cases()))
def test_importable_models_import(name, fold):
    """What index.json says imports does import (the rest keeps its recorded error)."""
    from tvm_fusion_hw.frontend import import_onnx  # pylint: disable=import-outside-toplevel

    mod = import_onnx(corpus.load(name, batch=1, fold=fold))
    assert int(mod["main"].attrs["num_input"]) == len(corpus.entry(name)["inputs"])


def test_failures_are_recorded_with_one_line():
    for name in NAMES:
        e = corpus.entry(name)
        for key in ("tvm_import", "tvm_import_folded", "tvm_import_symbolic", "onnxruntime"):
            value = e.get(key, "ok")
            assert value in ("ok", "finite") or value.startswith(("error: ", "NON-FINITE")), (name, key)
            assert "\n" not in value
        assert "\n" not in e.get("llvm_build", "")


def test_cli_lists_the_corpus_with_its_source(capsys):
    from tvm_fusion_hw.cli import main  # pylint: disable=import-outside-toplevel

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    zoo, listed = out.split("\ncorpus: ")
    assert "mobilenet_v2" in zoo  # the zoo, as before
    for name in NAMES:
        e = corpus.entry(name)
        line = next(ln for ln in listed.splitlines() if ln.split() and ln.split()[0] == name)
        assert e["library"] in line and e["version"] in line and e["constructor"] in line
    assert listed.startswith(f"{len(NAMES)} real models")


def test_graphs_unpack_to_valid_protobuf():
    total = 0
    for name in NAMES:
        data = corpus.graph_path(name).read_bytes()
        total += len(data)
        assert onnx.load_model_from_string(lzma.decompress(data)).graph.node
    assert total < 4 * 1024 * 1024, "keep the corpus a few MiB"
