"""The bundle runner's PyTorch path for corpus models (CPU only; the torch tests skip without torch).

One constructor table (models/corpus/torch_source.py) builds a corpus model for export.py and for
the runner; the bundle ships it; the runner's inputs are the corpus' own; --torch-warm children
that fail or hang are reported, never raised.
"""

import json
import sys
import types
from argparse import Namespace

import numpy as np
import pytest

from tvm_fusion_hw.bundle import runtime
from tvm_fusion_hw.models import corpus
from tvm_fusion_hw.models.corpus import export, torch_source
from script_loader import load_script


def _runner_timing():
    return load_script(runtime.runner_files()["runner_timing.py"], "runner_timing_under_test")


def _entry(name, batch):
    """A manifest entry as the writer makes it for corpus model ``name`` (inputs from the index)."""
    inputs = [{"name": i["name"], "shape": [batch if d == corpus.BATCH_DIM else d for d in i["shape"]],
               "dtype": i["dtype"]} for i in corpus.entry(name)["inputs"]]
    return {"model": f"corpus:{name}", "batch": batch, "seed": 0, "input_seed": 0, "inputs": inputs, "params": []}


@pytest.fixture(scope="module")
def builders_bundle(tmp_path_factory):
    """A folder with what the bundle writer puts under builders/, and a manifest of two corpus rows."""
    out = tmp_path_factory.mktemp("torch_bundle")
    runtime.copy_builders(out / "builders")
    entries = [_entry("squeezenet1_0", 1), _entry("distilbert", 2)]
    (out / "manifest.json").write_text(json.dumps({"entries": entries}))
    return out


def test_one_constructor_table():
    """export.py exports from torch_source's table (no copy of it) and the corpus index agrees
    with it: every exported model, its library, constructor and inputs (names, order, shapes, dtypes)."""
    assert export.SPECS is torch_source.SPECS and export.SPEC is torch_source.SPEC
    assert not hasattr(export, "_Wrap") and not hasattr(export, "_randomize")
    failed = {f["name"] for f in json.loads(corpus.INDEX.read_text()).get("export_failures", [])}
    assert set(corpus.names()) | failed == set(torch_source.SPEC)
    for name, entry in corpus.index().items():
        _, family, library, ctor, _, _ = torch_source.spec(name)
        assert (entry["family"], entry["library"], entry["constructor"]) == (family, library, ctor), name
        assert torch_source.input_specs(name) == entry["inputs"], name
        assert torch_source.input_names(name) == [i["name"] for i in entry["inputs"]], name
    with pytest.raises(KeyError, match="no PyTorch constructor for corpus model 'nope'"):
        torch_source.spec("nope")


def test_bundle_ships_torch_source(builders_bundle):
    """The runner finds the corpus' constructors in the bundle, loaded by path (no onnx needed);
    export.py stays out."""
    corpus_dir = builders_bundle / "builders" / "tvm_fusion_hw" / "models" / "corpus"
    shipped = corpus_dir / "torch_source.py"
    assert shipped.read_bytes() == (corpus.HERE / "torch_source.py").read_bytes()
    assert not (corpus_dir / "export.py").exists()
    source = _runner_timing().corpus_torch_source(builders_bundle)
    assert source.__file__ == str(shipped) and source.SPECS == torch_source.SPECS


@pytest.mark.parametrize("name, batch", [("squeezenet1_0", 2), ("bert", 2), ("gpt2", 1)])
def test_runner_inputs_are_the_corpus_inputs(name, batch):
    """make_inputs gives what corpus.example_inputs gives (valid token ids, masks of ones), in
    graph order: the same arrays feed TVM and PyTorch."""
    got = _runner_timing().make_inputs(_entry(name, batch))
    want = corpus.example_inputs(name, batch=batch, seed=0)
    assert len(got) == len(want)
    for arr, (key, ref) in zip(got, want.items()):
        assert arr.dtype == ref.dtype and np.array_equal(arr, ref), key
    ids = [a for a in got if a.dtype == np.int64]
    assert all(a.min() >= 1 for a in ids)  # no negative ids: torch's embedding would fail on them


def test_torch_model_refuses_other_inputs(builders_bundle):
    """A bundle whose inputs differ from the constructor's (order here) is an error, not a wrong run."""
    entry = _entry("distilbert", 2)
    entry["inputs"].reverse()
    with pytest.raises(ValueError, match="the PyTorch model takes"):
        _runner_timing().torch_model(entry, types.SimpleNamespace(nn=None), builders_bundle)


def _warm_args(**kw):
    base = {"torch_modes": ["compile_graphs"], "torch_warm": 2, "torch_warm_timeout": 120, "device": "cpu"}
    return Namespace(**{**base, **kw})


def test_warm_children_that_fail_or_hang_are_reported(builders_bundle):
    """A child that fails (no such row in the manifest) or times out gives an error for its row."""
    rt = _runner_timing()
    python = [sys.executable]
    missing = [{"model": "corpus:nope", "batch": 1}]
    res = rt.warm_torch(missing, _warm_args(), builders_bundle, python)
    assert "exited with 1" in res[("corpus:nope", 1)]["error"]
    res = rt.warm_torch([_entry("squeezenet1_0", 1)], _warm_args(torch_warm_timeout=0.01), builders_bundle, python)
    assert res[("corpus:squeezenet1_0", 1)] == {"error": "timed out after 0 s"}
    assert rt.warm_torch(missing, _warm_args(torch_modes=["eager"]), builders_bundle, python) == {}


def test_corpus_models_run_in_torch(builders_bundle):
    """squeezenet1_0 (torchvision) and distilbert (transformers, int64 inputs) are built from the
    bundle and run eagerly on the runner's inputs; bench_torch times the eager column."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    rt = _runner_timing()
    for entry, shape in ((_entry("squeezenet1_0", 1), (1, 1000)), (_entry("distilbert", 2), (2, 128, 768))):
        if entry["model"] == "corpus:distilbert":
            pytest.importorskip("transformers")
        model = rt.torch_model(entry, torch, builders_bundle)
        assert not model.training
        with torch.no_grad():
            out = model(*[torch.from_numpy(x) for x in rt.make_inputs(entry)])
        assert tuple(out.shape) == shape and bool(torch.isfinite(out).all()), entry["model"]
    row = {"model": "corpus:squeezenet1_0", "batch": 1, "times_s": {}, "errors": {}, "notes": []}
    args = Namespace(device="cpu", torch_modes=["eager"], repeat=2, min_repeat_ms=1, bundle=str(builders_bundle))
    entry = _entry("squeezenet1_0", 1)
    rt.bench_torch(entry, rt.make_inputs(entry), args, row)
    assert row["times_s"]["eager"] > 0 and not row["errors"], row["errors"]
