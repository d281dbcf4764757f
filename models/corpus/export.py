"""Export the real-model corpus: torchvision, timm and transformers models to stripped ONNX graphs.

Runs where torch, torchvision, timm, transformers, onnx and onnxruntime are installed (the GPU box;
no network, no TVM, no GPU needed), not in the plugin's environment::

    python3 models/corpus/export.py --out /tmp/corpus --jobs 8      # every model, 8 processes
    python3 models/corpus/export.py --out /tmp/corpus --only resnet18,bert

Each model is built by ``torch_source.build`` from the constructor table there (shared with the
bundle runner, which times the same modules in PyTorch): random weights (torchvision
``weights=None``, timm ``pretrained=False``, transformers from a Config with 2 layers), its
parameters drawn again so that none is a constant (BatchNorm statistics, LayerNorm scales, zero
biases), wrapped to one tensor output; then exported with ``torch.onnx.export``
(the TorchScript exporter, ``dynamo=False``, opset 17; the dynamo exporter if that fails) with a
symbolic batch dimension ``batch`` on every input and output. onnx.checker checks it and
onnxruntime runs it at batch 2 against torch's output, so the symbolic batch is known to work.

Then the large float initializers (at least ``MIN_STRIP`` elements, more than ``MAX_DISTINCT``
distinct values: weights, not masks or shape constants) lose their data: each keeps its name,
dtype and dims, is marked external data at location ``stripped``, and carries its original mean,
std, min and max as JSON in ``doc_string``, which the materializer (``models/corpus/__init__.py``)
uses to draw seeded values of the same distribution. Everything else (integer constants, small or
structured float tensors) is kept byte for byte. ``value_info`` is dropped (shapes are inferred
again). The graph is written xz-compressed as ``NAME.onnx.xz``, beside ``NAME.json`` (what was
built and how) and, at the end, ``manifest.json`` with every entry, failures included.

Only the standard library, numpy, onnx and ``torch_source`` (standard library only) are imported at
module level, so ``strip_model`` runs (and is tested) without torch.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

try:
    from . import torch_source
except ImportError:  # run as a script (no tvm_fusion_hw on the GPU box): this folder is sys.path[0]
    import torch_source  # type: ignore[no-redef]

OPSET = 17
#: float initializers below this many elements are kept as they are
MIN_STRIP = 64
#: ... and so are those with at most this many distinct values (masks, constant fills)
MAX_DISTINCT = torch_source.MAX_DISTINCT
STRIPPED_LOCATION = "stripped"
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
               onnx.TensorProto.BFLOAT16}

SPECS, SPEC = torch_source.SPECS, torch_source.SPEC  # the table lives beside: the runner reads it too


# ---------------------------------------------------------------------------- stripping (no torch)

def _constants_to_initializers(graph: onnx.GraphProto) -> int:
    """Turn large float Constant nodes into initializers, so that stripping sees them."""
    moved, keep = 0, []
    for node in graph.node:
        attr = node.attribute[0] if node.op_type == "Constant" and len(node.attribute) == 1 else None
        if attr is not None and attr.name == "value" and attr.t.data_type in FLOAT_TYPES \
                and int(np.prod(attr.t.dims)) >= MIN_STRIP:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(attr.t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
            moved += 1
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    return moved


def _stats(array: np.ndarray) -> dict:
    a = array.astype(np.float64)
    return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}


def strip_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """A copy of ``model`` whose weights have no data (see the module docstring), and a summary."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    moved = _constants_to_initializers(out.graph)
    del out.graph.value_info[:]
    stripped, kept, params = 0, 0, 0
    for tensor in out.graph.initializer:
        numel = int(np.prod(tensor.dims)) if tensor.dims else 1
        if tensor.data_type not in FLOAT_TYPES or numel < MIN_STRIP:
            kept += 1
            continue
        array = numpy_helper.to_array(tensor)
        if len(np.unique(array)) <= MAX_DISTINCT:
            kept += 1
            continue
        params += numel
        stats = _stats(array)
        for field in ("raw_data", "float_data", "double_data", "int32_data"):
            tensor.ClearField(field)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", STRIPPED_LOCATION
        tensor.doc_string = json.dumps(stats)
        stripped += 1
    return out, {"stripped_initializers": stripped, "kept_initializers": kept, "stripped_params": params,
                 "constants_moved": moved}


# ---------------------------------------------------------------------------- export (torch)

def _library_version(library: str) -> str:
    import importlib  # pylint: disable=import-outside-toplevel

    return importlib.import_module(library).__version__


def _export(wrapped, inputs, path: Path) -> str:
    """Export to ``path``; the exporter used, as text."""
    import torch  # pylint: disable=import-outside-toplevel

    names = [n for n, _ in inputs]
    args = tuple(t for _, t in inputs)
    axes = {n: {0: "batch"} for n in names + ["output"]}
    try:
        torch.onnx.export(wrapped, args, str(path), dynamo=False, opset_version=OPSET, input_names=names,
                          output_names=["output"], dynamic_axes=axes, do_constant_folding=True)
        return f"torch.onnx.export(dynamo=False, opset_version={OPSET}, dynamic_axes=batch)"
    except Exception as err:  # pylint: disable=broad-except
        first = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:300]}"
    batch = torch.export.Dim("batch", min=1, max=4096)
    prog = torch.onnx.export(wrapped, args, dynamo=True, opset_version=18, input_names=names,
                             output_names=["output"], dynamic_shapes=tuple({0: batch} for _ in names))
    prog.save(str(path), external_data=False)
    return f"torch.onnx.export(dynamo=True, opset_version=18, dynamic_shapes=batch) (TorchScript exporter: {first})"


def export_one(name: str, out_dir: Path) -> dict:
    """Build, export, check, strip and write one model; its manifest entry."""
    import torch  # pylint: disable=import-outside-toplevel

    _, family, library, ctor, _, notes = SPEC[name]
    entry = {"name": name, "family": family, "library": library, "version": _library_version(library),
             "constructor": ctor, "torch": torch.__version__, "notes": notes}
    start = time.time()
    wrapped = torch_source.build(name)  # the same module the bundle runner times
    inputs = torch_source.example_inputs(name, 2)
    entry["inputs"] = [{"name": n, "shape": ["batch", *t.shape[1:]], "dtype": str(t.dtype).replace("torch.", "")}
                       for n, t in inputs]
    full = out_dir / f"{name}.full.onnx"
    entry["exporter"] = _export(wrapped, inputs, full)
    model_proto = onnx.load(str(full))
    onnx.checker.check_model(model_proto)
    entry["opset"] = next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))
    entry["outputs"] = [{"name": o.name, "shape": [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim],
                         "dtype": onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type).name}
                        for o in model_proto.graph.output]
    entry["ort_check"] = _ort_check(full, wrapped, inputs)
    stripped, summary = strip_model(model_proto)
    entry.update(summary)
    entry["nodes"] = len(stripped.graph.node)
    entry["ops"] = sorted({n.op_type for n in stripped.graph.node})
    data = lzma.compress(stripped.SerializeToString(), preset=9 | lzma.PRESET_EXTREME)
    (out_dir / f"{name}.onnx.xz").write_bytes(data)
    entry["graph_bytes_xz"] = len(data)
    entry["export_s"] = round(time.time() - start, 1)
    full.unlink()
    return entry


def _ort_check(path: Path, wrapped, inputs) -> str:
    """onnxruntime at batch 2 (the symbolic batch) against torch: max abs error, or why not."""
    import torch  # pylint: disable=import-outside-toplevel

    try:
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "onnxruntime not installed"
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        got = sess.run(None, {n: t.numpy() for n, t in inputs})[0]
        with torch.no_grad():
            want = wrapped(*[t for _, t in inputs]).numpy()
        err = float(np.max(np.abs(got - want)))
        scale = float(np.max(np.abs(want)))
        return f"batch 2: max abs error {err:.3g} (output max {scale:.3g}), finite {bool(np.isfinite(got).all())}"
    except Exception as err:  # pylint: disable=broad-except
        return f"failed: {type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:300]}"


# ---------------------------------------------------------------------------- driver

def _run_child(name: str, out_dir: Path, timeout: int) -> dict:
    start = time.time()
    cmd = [sys.executable, __file__, "--one", name, "--out", str(out_dir)]
    env = dict(os.environ, OMP_NUM_THREADS="2", PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        log = (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired:
        proc, log = None, f"timed out after {timeout}s"
    result = out_dir / f"{name}.json"
    if proc is not None and proc.returncode == 0 and result.is_file():
        entry = json.loads(result.read_text())
    else:
        entry = {"name": name, "family": SPEC[name][1], "library": SPEC[name][2], "constructor": SPEC[name][3],
                 "error": (json.loads(result.read_text()).get("error") if result.is_file() else None) or log[-600:]}
    print(f"{time.time() - start:6.1f}s {name:30} {'ok' if 'error' not in entry else 'FAILED: ' + entry['error'][-200:]}",
          flush=True)
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--only", help="comma-separated model names (default: all)")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per model")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        import torch  # pylint: disable=import-outside-toplevel

        torch.set_num_threads(2)
        try:
            entry = export_one(args.one, args.out)
        except Exception as err:  # pylint: disable=broad-except
            traceback.print_exc()
            line = (str(err).strip().splitlines() or [""])[0][:400]
            (args.out / f"{args.one}.json").write_text(json.dumps({"error": f"{type(err).__name__}: {line}"}))
            return 1
        (args.out / f"{args.one}.json").write_text(json.dumps(entry, indent=1))
        return 0
    names = args.only.split(",") if args.only else [s[0] for s in SPECS]
    unknown = [n for n in names if n not in SPEC]
    if unknown:
        parser.error(f"unknown models: {unknown}")
    with ThreadPoolExecutor(args.jobs) as pool:
        entries = list(pool.map(lambda n: _run_child(n, args.out, args.timeout), names))
    (args.out / "manifest.json").write_text(json.dumps(entries, indent=1))
    failed = [e["name"] for e in entries if "error" in e]
    print(f"{len(entries) - len(failed)} exported, {len(failed)} failed: {failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
