"""The real-model corpus: architectures from torchvision, timm and transformers, stored stripped.

``graphs/NAME.onnx.xz`` holds each model's graph as its library exported it (``export.py``, run
where torch is installed) with the weights' data removed; ``index.json`` says where each came from
(library, version, constructor call), its inputs, and what TVM's importer makes of it.
:func:`load` puts seeded random weights back and fixes the batch dimension:

>>> from tvm_fusion_hw.models import corpus
>>> corpus.names()[:3]
['resnet18', 'resnet50', 'wide_resnet50_2']
>>> model = corpus.load("resnet18", batch=32, seed=0)     # onnx.ModelProto, weights filled
>>> feeds = corpus.example_inputs("resnet18", batch=32)   # {"input": float32 [32, 3, 224, 224]}

Each stripped weight carries its original mean, std, min and max (from torch's own initialisation),
and is refilled from a normal distribution with that mean and std, clipped to that range: weights
keep the scale that keeps activations finite, BatchNorm variances stay positive. The values depend
on the seed and the tensor's name only. Integer tensors and small or structured float tensors
(shape constants, masks) were never stripped.
"""

from __future__ import annotations

import json
import lzma
import re
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from tvm_fusion_hw.errors import FusionHWError

HERE = Path(__file__).resolve().parent
GRAPHS = HERE / "graphs"
INDEX = HERE / "index.json"
STRIPPED_LOCATION = "stripped"  # as export.py writes it
BATCH_DIM = "batch"

__all__ = [
    "BATCH_DIM",
    "GRAPHS",
    "INDEX",
    "describe",
    "entry",
    "example_inputs",
    "index",
    "load",
    "graph_path",
    "load_stripped",
    "names",
    "stripped_initializers",
]


@lru_cache(maxsize=1)
def _index() -> dict[str, dict]:
    if not INDEX.is_file():
        return {}
    return {e["name"]: e for e in json.loads(INDEX.read_text())["models"]}


def index() -> dict[str, dict]:
    """Every corpus entry by name (a copy of ``index.json``'s ``models``)."""
    return {name: dict(e) for name, e in _index().items()}


def names() -> list[str]:
    """Names of the corpus models, in index order."""
    return list(_index())


def entry(name: str) -> dict:
    """The index entry of ``name``: family, library, version, constructor, inputs, tvm_import, ..."""
    if name not in _index():
        raise FusionHWError(f"unknown corpus model {name!r}; known: {', '.join(_index())}")
    return dict(_index()[name])


def graph_path(name: str) -> Path:
    return GRAPHS / f"{entry(name)['name']}.onnx.xz"


@lru_cache(maxsize=8)
def _stripped_bytes(name: str) -> bytes:
    return lzma.decompress(graph_path(name).read_bytes())


def load_stripped(name: str) -> onnx.ModelProto:
    """The stored graph as it is: weights without data, batch symbolic."""
    return onnx.load_model_from_string(_stripped_bytes(name))


def _is_stripped(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        kv.key == "location" and kv.value == STRIPPED_LOCATION for kv in tensor.external_data)


def stripped_initializers(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The initializers of a stored graph whose data was removed."""
    return [t for t in model.graph.initializer if _is_stripped(t)]


def _fan_in(dims) -> int:
    return int(np.prod(dims[1:])) if len(dims) >= 2 else 1


def _fill(tensor: onnx.TensorProto, seed: int) -> None:
    """Seeded values for one stripped tensor, in place: its recorded distribution, else by fan-in."""
    dims = tuple(tensor.dims)
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    rng = np.random.default_rng([seed, zlib.crc32(tensor.name.encode())])
    values = rng.standard_normal(dims, dtype=np.float32)
    stats = json.loads(tensor.doc_string) if tensor.doc_string else None
    if stats:
        values *= np.float32(stats["std"])
        values += np.float32(stats["mean"])
        np.clip(values, stats["min"], stats["max"], out=values)
    else:  # no record: a weight scaled by 1/sqrt(fan-in), a small vector near zero
        values *= np.float32(1.0 / np.sqrt(_fan_in(dims)) if len(dims) >= 2 else 0.02)
    tensor.ClearField("external_data")
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.doc_string = ""
    tensor.raw_data = values.astype(dtype).tobytes()


def _fix_batch(value_infos, batch: int) -> None:
    for vi in value_infos:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.dim_param == BATCH_DIM:
                dim.dim_value = batch  # clears dim_param (a oneof)


def load(name: str, batch: int | None = 1, seed: int = 0, fold: bool = False) -> onnx.ModelProto:
    """Corpus model ``name`` with seeded weights, its batch dimension fixed to ``batch``.

    ``batch=None`` leaves the batch symbolic (``batch``). The same ``(name, seed)`` gives the same
    bytes; another seed, other weights. ``fold`` (a fixed batch only) folds the exporter's shape
    arithmetic into constants first (:mod:`.fold`), which TVM's importer needs for some graphs.
    """
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise FusionHWError(f"batch must be a positive integer or None, got {batch!r}")
    if fold and batch is None:
        raise FusionHWError("fold needs a fixed batch")
    model = load_stripped(name)
    if batch is not None:
        _fix_batch(model.graph.input, batch)
        _fix_batch(model.graph.output, batch)
    if fold:
        from .fold import fold_shapes  # pylint: disable=import-outside-toplevel

        fold_shapes(model, is_stripped=_is_stripped)
    for tensor in stripped_initializers(model):
        _fill(tensor, seed)
    return model


def example_inputs(name: str, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for ``name`` at ``batch``: images N(0, 1), token ids in [3, 1000), masks of ones."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in entry(name)["inputs"]:
        shape = [batch if d == BATCH_DIM else d for d in spec["shape"]]
        if spec["name"] == "attention_mask":
            feeds[spec["name"]] = np.ones(shape, dtype=spec["dtype"])
        elif spec["dtype"].startswith("int"):
            feeds[spec["name"]] = rng.integers(3, 1000, size=shape, dtype=spec["dtype"])
        else:
            feeds[spec["name"]] = rng.standard_normal(shape, dtype=np.float32).astype(spec["dtype"])
    return feeds


def _importability(e: dict) -> str:
    raw, folded = e.get("tvm_import", "not surveyed"), e.get("tvm_import_folded")
    if raw == "ok":
        return "imports"
    if folded == "ok":
        return "imports with fold=True (" + raw.removeprefix("error: ")[:70] + ")"
    return "does not import: " + (folded or raw).removeprefix("error: ")[:100]


def describe() -> list[str]:
    """The corpus as lines for ``tvm-fusion-hw models``: source, input and what TVM's importer says."""
    entries = list(_index().values())
    lines = [f"corpus: {len(entries)} real models (tvm_fusion_hw.models.corpus.load(name, batch, seed); "
             f"random weights, symbolic batch)"]
    for e in entries:
        shapes = ", ".join(f"{i['name']} {i['dtype']}[{','.join(str(d) for d in i['shape'])}]" for i in e["inputs"])
        lines.append(f"  {e['name']:28} {e['family']:13} {e['library']} {e['version']}: {e['constructor']}")
        build = re.sub(r" \(\d+s\)", "", e["llvm_build"]) if e.get("llvm_build") else ""
        lines.append(f"  {'':28} {'':13} {shapes}; {_importability(e)}" + (f"; llvm build: {build}" if build else ""))
    failures = json.loads(INDEX.read_text()).get("export_failures", []) if INDEX.is_file() else []
    for f in failures:
        lines.append(f"  {f['name']:28} {f['family']:13} not exported: {f['error'][:100]}")
    return lines
