"""Build ``index.json`` from the exporter's manifest and record what each tool makes of every model.

Maintainer's script, run here (CPU, TVM installed), after ``export.py`` ran on the GPU box::

    python -m tvm_fusion_hw.models.corpus.survey --manifest /tmp/corpus/manifest.json   # new graphs
    python -m tvm_fusion_hw.models.corpus.survey                  # onnxruntime + TVM import, again
    python -m tvm_fusion_hw.models.corpus.survey --build          # also llvm builds (slow)

For each model at batch 1, seed 0: ``onnxruntime`` (CPU) runs it and says whether the outputs are
finite; ``tvm_import`` is ``ok`` or the importer's one-line error; with ``--build``, ``llvm_build``
is the stock build's and the hardware-aware build's (profile nvidia-h200) outcome. Where the
graph does not import, ``tvm_import_folded`` says whether it does after ``corpus.load(fold=True)``;
``tvm_import_symbolic`` is the import of the graph with its batch left symbolic.
Failures are recorded, never dropped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from tvm_fusion_hw.models import corpus

#: manifest fields that go into the index, in this order
FIELDS = ["name", "family", "library", "version", "constructor", "torch", "exporter", "opset", "inputs", "outputs",
          "notes", "nodes", "ops", "stripped_initializers", "kept_initializers", "stripped_params",
          "graph_bytes_xz", "ort_check"]
ABOUT = ("Real-model corpus: graphs exported by models/corpus/export.py (random weights, symbolic batch), "
         "weights stripped; load with tvm_fusion_hw.models.corpus.load(name, batch, seed). ort_check: "
         "onnxruntime against torch at export time (batch 2). onnxruntime / tvm_import / llvm_build: this "
         "survey at batch 1, seed 0; llvm_build is of the folded graph where the raw one does not import.")


def _one_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:400]


def from_manifest(manifest: Path) -> dict:
    """Copy the exported graphs into graphs/ and start an index from the manifest."""
    entries = json.loads(manifest.read_text())
    models, failures = [], []
    corpus.GRAPHS.mkdir(exist_ok=True)
    for e in entries:
        if "error" in e:
            failures.append({k: e[k] for k in ("name", "family", "library", "constructor", "error")})
            continue
        shutil.copyfile(manifest.parent / f"{e['name']}.onnx.xz", corpus.GRAPHS / f"{e['name']}.onnx.xz")
        models.append({k: e[k] for k in FIELDS if k in e})
    return {"about": ABOUT, "models": models, "export_failures": failures}


def run_onnxruntime(name: str, model: onnx.ModelProto) -> str:
    try:
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "onnxruntime not installed"
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        outs = sess.run(None, corpus.example_inputs(name, batch=1))
    except Exception as err:  # pylint: disable=broad-except
        return f"error: {_one_line(err)}"
    bad = sum(int(not np.isfinite(o).all()) for o in outs)
    return "finite" if not bad else f"NON-FINITE ({bad} of {len(outs)} outputs)"


def tvm_import(model: onnx.ModelProto):
    from tvm_fusion_hw.frontend import import_onnx  # pylint: disable=import-outside-toplevel

    try:
        return import_onnx(model), "ok"
    except Exception as err:  # pylint: disable=broad-except
        msg = str(err).removeprefix("TVM could not import <model>: ")
        return None, f"error: {msg[:400]}"


def llvm_builds(mod) -> str:
    import tvm  # pylint: disable=import-outside-toplevel

    import tvm_fusion_hw as hw  # pylint: disable=import-outside-toplevel

    llvm = tvm.target.Target({"kind": "llvm"})
    out = []
    for label, make in (("stock", lambda: None),
                        ("hw", lambda: hw.get_pipeline(llvm, profile="nvidia-h200"))):
        start = time.time()
        try:
            pipeline = make()
            if pipeline is None:
                tvm.compile(mod, target="llvm")
            else:
                tvm.compile(mod, target=llvm, relax_pipeline=pipeline)
            out.append(f"{label} ok ({time.time() - start:.0f}s)")
        except Exception as err:  # pylint: disable=broad-except
            out.append(f"{label} error: {_one_line(err)}")
    return "; ".join(out)


def survey(index: dict, only=None, build: bool = False) -> None:
    for e in index["models"]:
        if only and e["name"] not in only:
            continue
        corpus._index.cache_clear()  # pylint: disable=protected-access
        start = time.time()
        model = corpus.load(e["name"], batch=1, seed=0)
        try:
            onnx.checker.check_model(model)
            e["onnx_checker"] = "ok"
        except Exception as err:  # pylint: disable=broad-except
            e["onnx_checker"] = f"error: {_one_line(err)}"
        e["onnxruntime"] = run_onnxruntime(e["name"], model)
        mod, e["tvm_import"] = tvm_import(model)
        e.pop("tvm_import_folded", None)
        if mod is None:  # the exporter's shape arithmetic folded first (corpus.load(fold=True))
            mod, e["tvm_import_folded"] = tvm_import(corpus.load(e["name"], batch=1, seed=0, fold=True))
        e["tvm_import_symbolic"] = tvm_import(corpus.load(e["name"], batch=None, seed=0))[1]
        if build and mod is not None:
            e["llvm_build"] = llvm_builds(mod)
        print(f"{time.time() - start:6.1f}s {e['name']:30} ort {e['onnxruntime']:10} import {e['tvm_import'][:120]}"
              + (f" folded {e['tvm_import_folded'][:120]}" if "tvm_import_folded" in e else "")
              + (f" build {e.get('llvm_build')}" if build else ""), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, help="export.py's manifest.json: replace graphs/ and the index")
    parser.add_argument("--only", help="comma-separated names")
    parser.add_argument("--build", action="store_true", help="also build for llvm, stock and hardware-aware")
    args = parser.parse_args(argv)
    if args.manifest:
        index = from_manifest(args.manifest)
    else:
        index = json.loads(corpus.INDEX.read_text())
    corpus.INDEX.write_text(json.dumps(index, indent=1) + "\n")
    survey(index, only=set(args.only.split(",")) if args.only else None, build=args.build)
    corpus.INDEX.write_text(json.dumps(index, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
