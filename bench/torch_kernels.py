#!/usr/bin/env python3
"""PyTorch's own kernels for corpus models, op by op: what cuBLAS and the fused attention take.

Where the plugin is behind torch.compile (the transformers at batch 32, fp32 GEMMs), the question is
which of torch's kernels does each part faster. This runs a corpus model in PyTorch on the GPU
(fp32, TF32 off, as the runner's columns do), eager and optionally ``torch.compile``'d, under
``torch.profiler``, and writes per iteration: the device time of each aten op by its input shapes
(a GEMM's ``M x K @ K x N``, attention's ``scaled_dot_product_attention``), and of each kernel by
name. Eager's GEMMs are the cuBLAS calls ``torch.compile`` also makes (inductor leaves fp32 GEMMs
to cuBLAS unless autotuning), so the ``aten::addmm`` rows read against the plugin's GEMM kernels of
the same shape (``run.py --kernel-profile``).

Runs where PyTorch and the corpus' model libraries are installed (the GPU box); needs no TVM:

    python3 bench/torch_kernels.py --models deit_tiny vit_b_16 --batch 32 --out DIR [--compile]

Writes ``DIR/torch_kernels.json`` and ``DIR/torch_kernels.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Dict, List

#: profiled iterations (after WARM untimed ones); the tables are per iteration
ITERATIONS = 5
WARM = 3
#: rows of each table in the markdown
TOP = 25


def _torch_source():
    """``models/corpus/torch_source.py`` loaded by path (its package imports onnx)."""
    path = Path(__file__).resolve().parents[1] / "models" / "corpus" / "torch_source.py"
    spec = importlib.util.spec_from_file_location("corpus_torch_source", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def profile_model(name: str, batch: int, compiled: bool) -> Dict[str, object]:
    """One model's per-iteration device time: ``ops`` (aten op and input shapes) and ``kernels``
    (kernel names), each ``[{"name", "us", "calls"}]`` largest first, and ``total_us`` (kernels)."""
    import torch  # pylint: disable=import-outside-toplevel
    from torch.profiler import ProfilerActivity, profile  # pylint: disable=import-outside-toplevel

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    source = _torch_source()
    model = source.build(name).cuda()
    inputs = [t.cuda() for _, t in source.example_inputs(name, batch)]
    fn = torch.compile(model) if compiled else model
    with torch.no_grad():
        for _ in range(WARM):
            fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(ITERATIONS):
                fn(*inputs)
            torch.cuda.synchronize()
    ops = [{"name": f"{e.key} {e.input_shapes}", "us": e.self_device_time_total / ITERATIONS,
            "calls": e.count / ITERATIONS}
           for e in prof.key_averages(group_by_input_shape=True)
           if e.device_type.name == "CPU" and e.self_device_time_total > 0]  # ops, not their kernels
    kernels = [{"name": e.key, "us": e.self_device_time_total / ITERATIONS, "calls": e.count / ITERATIONS}
               for e in prof.key_averages() if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
    return {"model": name, "batch": batch, "mode": "compile" if compiled else "eager",
            "gpu": torch.cuda.get_device_name(), "ops": _largest_first(ops), "kernels": _largest_first(kernels),
            "total_us": round(sum(k["us"] for k in kernels), 3)}


def _largest_first(rows: List[dict]) -> List[dict]:
    rows = [{**r, "us": round(r["us"], 3), "calls": round(r["calls"], 2)} for r in rows]
    return sorted(rows, key=lambda r: -r["us"])


def markdown(results: List[Dict[str, object]], top: int = TOP) -> str:
    """The profiles as markdown: per model and mode, the ``top`` ops by input shape and kernels."""
    lines = ["# PyTorch's kernels, per iteration (`bench/torch_kernels.py`)", ""]
    for res in results:
        lines += [f"## {res['model']} b{res['batch']}, {res['mode']} ({res['gpu']}): "
                  f"{res['total_us']:.1f} us of kernels", ""]
        for key, title in (("ops", "aten op and input shapes"), ("kernels", "kernel")):
            lines += [f"| {title} | us | calls | us a call |", "| --- | ---: | ---: | ---: |"]
            for row in res[key][:top]:
                per_call = row["us"] / row["calls"] if row["calls"] else 0.0
                lines.append(f"| `{row['name'][:160]}` | {row['us']:.1f} | {row['calls']:g} | {per_call:.1f} |")
            lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True, help="corpus model names (e.g. deit_tiny)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--compile", action="store_true", help="also profile torch.compile (default mode)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.models:
        for compiled in (False, True) if args.compile else (False,):
            try:
                results.append(profile_model(name, args.batch, compiled))
            except Exception as err:  # pylint: disable=broad-except
                print(f"{name}: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
                continue
            print(f"{name} b{args.batch} {results[-1]['mode']}: {results[-1]['total_us']:.1f} us of kernels",
                  flush=True)
            (args.out / "torch_kernels.json").write_text(json.dumps(results, indent=1))
            (args.out / "torch_kernels.md").write_text(markdown(results))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
