#!/usr/bin/env python3
"""Compile time of the hardware-aware pipeline against stock TVM's, model by model (no GPU needed).

Each model x batch is imported once (weights lifted, as the bundle compiles it), then compiled
for the profile's target with the stock pipeline and with ``get_pipeline`` alternately,
``--repeat`` times each, one at a time in this process (the bundle's compile times overlap with
nvcc runs). Stock compiles under TVM's default PassContext, the plugin under
``hw.pass_context(target)`` (``cp.async`` on sm_80 and newer), as a user builds each. The median of
each is reported, in wall-clock seconds and in this process's CPU seconds (on a shared machine the
CPU time is the steadier figure), and hw/stock as the ratio of the medians.

Every compile is timed cold: a new pipeline each time (the plugin's per-pipeline memos of
template plans and kernel verifications start empty), and the tile models' process-wide caches
(the conv+pool and depthwise rankings, which the rules reuse after the policy planned with them,
the bank simulations) are cleared before each (``schedules.clear_caches``), so that no compile
reuses an earlier one's work. ``--warmup`` compiles each pipeline that many times first, untimed.

    python bench/compile_times.py --models corpus:mobilenet_v2 corpus:bert --batches 1 --repeat 3 \\
        --out bench/results/<dir>/compile_times.md
    python bench/compile_times.py --profile amd-mi300x --models corpus:resnet50 --batches 1
"""

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

import tvm

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.model_import import import_model
from tvm_fusion_hw.bundle.writer import DEFAULT_MODELS
from tvm_fusion_hw.schedules import clear_caches

PIPELINES = ("stock", "hw")


def compile_once(mod, target, which: str) -> Dict[str, object]:
    """One cold compile of ``mod`` with pipeline ``which``: its wall and CPU seconds, or
    ``{"error": ...}`` where it fails (stock TVM's dlight Matmul on squeeze-and-excitation blocks
    at batch 32)."""
    if which == "stock":
        pipeline, context = hw.stock_pipeline(target), tvm.transform.PassContext()
    else:
        pipeline, context = hw.get_pipeline(target), hw.pass_context(target)
    clear_caches()  # cold: no ranking from an earlier compile
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        with context:  # the plugin's options, as the bundle builds
            tvm.compile(mod, target=target, relax_pipeline=pipeline)
    except Exception as err:  # pylint: disable=broad-except
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        return {"error": f"{type(err).__name__}: {(lines or [''])[-1][:120]}"}
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def measure(model: str, batch: int, target, repeat: int, warmup: int = 0) -> Dict[str, Dict[str, List[float]]]:
    """``{pipeline: {"wall": [s, ...], "cpu": [s, ...]}}``, ``repeat`` compiles each, alternating."""
    mod = import_model(model, batch)[1]  # lifted, as the bundle compiles it
    for _ in range(warmup):
        for which in PIPELINES:
            compile_once(mod, target, which)
    times = {which: {"wall": [], "cpu": []} for which in PIPELINES}
    for _ in range(repeat):
        for which in PIPELINES:
            if "error" in times[which]:
                continue  # it fails again
            done = compile_once(mod, target, which)
            if "error" in done:
                times[which]["error"] = done["error"]
                continue
            for key, value in done.items():
                times[which][key].append(value)
    return times


def row(model: str, batch: int, times) -> str:
    """One table row: medians of wall and CPU seconds, and hw/stock for each ("fails" where a
    pipeline does not build the model)."""
    failed = [w for w in PIPELINES if "error" in times[w]]
    if failed:
        cells = {w: "fails" if w in failed else f"{statistics.median(times[w]['wall']):.2f}" for w in PIPELINES}
        cpu = {w: "fails" if w in failed else f"{statistics.median(times[w]['cpu']):.2f}" for w in PIPELINES}
        errors = "; ".join(f"{w}: {times[w]['error']}" for w in failed)
        return (f"| {model} | {batch} | {cells['stock']} | {cells['hw']} | - | {cpu['stock']} | {cpu['hw']} | - "
                f"| {errors} |")
    med = {w: {k: statistics.median(v) for k, v in times[w].items()} for w in PIPELINES}
    wall = " / ".join(f"{t:.2f}" for t in times["hw"]["wall"])
    return (f"| {model} | {batch} | {med['stock']['wall']:.2f} | {med['hw']['wall']:.2f} | "
            f"{med['hw']['wall'] / med['stock']['wall']:.2f}x | {med['stock']['cpu']:.2f} | "
            f"{med['hw']['cpu']:.2f} | {med['hw']['cpu'] / med['stock']['cpu']:.2f}x | {wall} |")


def summary(measured) -> str:
    """The table's last line: the geometric mean of hw/stock wall medians over the rows both
    pipelines build, and the highest (``measured``: ``[(model, batch, times)]``)."""
    ratios = [(statistics.median(t["hw"]["wall"]) / statistics.median(t["stock"]["wall"]), m, b)
              for m, b, t in measured if not any("error" in t[w] for w in PIPELINES)]
    if not ratios:
        return "No row that both pipelines build."
    geomean = statistics.geometric_mean(r for r, _, _ in ratios)
    top, model, batch = max(ratios)
    return (f"Geometric mean hw/stock wall over the {len(ratios)} rows both build: {geomean:.3f}x; "
            f"highest {top:.2f}x ({model} b{batch}).")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                        help="zoo names, corpus:NAME or fuzz:NAME (default: the bundle's zoo)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--profile", default="nvidia-h200", help="hardware profile (e.g. amd-mi300x for ROCm)")
    parser.add_argument("--repeat", type=int, default=3, help="timed compiles of each pipeline")
    parser.add_argument("--warmup", type=int, default=0, help="untimed compiles of each pipeline first")
    parser.add_argument("--out", type=Path, help="write a markdown table here")
    args = parser.parse_args(argv)
    target = hw.target(args.profile)
    lines = [f"# Compile time for {args.profile} (seconds, median of {args.repeat}; "
             f"{target.kind.name} source/code objects, no nvcc)", "",
             "| model | batch | stock wall | hw wall | hw/stock wall | stock CPU | hw CPU | hw/stock CPU "
             "| hw wall, each run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    print("\n".join(lines), flush=True)
    measured = []
    for model in args.models:
        for batch in args.batches:
            measured.append((model, batch, measure(model, batch, target, args.repeat, args.warmup)))
            lines.append(row(*measured[-1]))
            print(lines[-1], flush=True)
    lines += ["", summary(measured)]
    print(lines[-1], flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
