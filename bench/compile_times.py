#!/usr/bin/env python3
"""Compile time of the hardware-aware pipeline against stock TVM's, model by model (no GPU needed).

Each model x batch is imported once, then compiled for the profile's CUDA target with the stock
pipeline and with ``get_pipeline`` alternately, ``--repeat`` times each, one at a time in this
process (the bundle's compile times overlap with nvcc runs). The minimum of each is reported.
Every compile is timed cold: the conv+pool tile model's caches (its rankings, which the rule
reuses after the policy planned with them, and its bank simulations) are cleared before each
(``clear_caches``), so that no compile reuses an earlier one's work.

    python bench/compile_times.py --out bench/results/<dir>/compile_times.md
"""

import argparse
import sys
import time
from pathlib import Path

import tvm

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.writer import DEFAULT_MODELS, import_model
from tvm_fusion_hw.schedules.conv_pool.tiles import clear_caches


def measure(model: str, batch: int, target, repeat: int):
    """(stock seconds, hardware-aware seconds), the minimum over ``repeat`` compiles each."""
    mod = import_model(model, batch)[1]  # lifted, as the bundle compiles it
    times = {"stock": [], "hw": []}
    for _ in range(repeat):
        for name, pipeline, context in (("stock", hw.stock_pipeline(target), tvm.transform.PassContext()),
                                        ("hw", hw.get_pipeline(target), hw.pass_context(target))):
            clear_caches()  # cold: no ranking from an earlier compile
            start = time.perf_counter()
            with context:  # the plugin's options, as the bundle builds
                tvm.compile(mod, target=target, relax_pipeline=pipeline)
            times[name].append(time.perf_counter() - start)
    return min(times["stock"]), min(times["hw"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--profile", default="nvidia-h200")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write a markdown table here")
    args = parser.parse_args(argv)
    target = hw.target(args.profile)
    lines = [f"# Compile time for {args.profile} (seconds, min of {args.repeat}; CUDA source, no nvcc)", "",
             "| model | batch | stock | hw | hw/stock |", "| --- | ---: | ---: | ---: | ---: |"]
    for model in args.models:
        for batch in args.batches:
            stock, ours = measure(model, batch, target, args.repeat)
            lines.append(f"| {model} | {batch} | {stock:.2f} | {ours:.2f} | {ours / stock:.2f}x |")
            print(lines[-1], flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
