"""The Winograd rule's costs against the H200 (issue 15): the figures of ``CALIBRATIONS["WinogradConv2d"]``.

``winograd_conv.decide`` costs a 3x3 convolution both ways with the GEMM template's tile model:
the direct convolution's plan against the batched GEMM's plan plus the two transforms. This script
reads a run's per-kernel times (the runner's ``--kernel-profile``) and pairs them with the models
of this checkout (``schedules.planners.kernel_plan`` on the same fused PrimFuncs, built with the
same knobs), in the rows :class:`tvm_fusion_hw.fusion.calibrations.Calibration` takes:

* ``fused``: the Winograd GEMMs (kernels ``matmul*`` of a CNN's build with Winograd layers);
* ``apart``: the direct 3x3 stride-1 convolutions (every such conv of a ``winograd=off`` build);
* ``streaming``: the transforms at batch 32 (bytes of their parameters, measured time);
* ``smallest``: the transforms at batch 1 (what a transform costs when its bytes do not show);
* ``gemm_streaming``: the Winograd GEMMs deep in the memory-bound region (FLOPs per parameter byte
  at most a quarter of the profile's ridge: their bytes set their time even at a quarter of the
  peak), as ``(kernel, bytes, measured us, bandwidth)``: the fraction of the bandwidth a GEMM bound
  by its bytes reaches, a batch-1 GEMM streaming a large transformed filter for instance
  (``CALIBRATIONS["WinogradGemm"]``).

    R=bench/results/2026-12-04-h200-winograd
    python bench/winograd_calibration.py $R/res/time/results.json $R/res2/time/results.json \\
        $R/res3/time/results.json $R/res4/time/results.json \\
        --write tvm_fusion_hw/fusion/calibration_data/winograd-h200.json --source "..."

``--keys gemm_streaming --batches 1`` rewrites only those rows of an existing ``--write`` file (the
others keep the models of the commit they were measured against).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

#: a variant's name suffix -> the knobs it was built with
_VARIANT_KNOBS = {"hw": {}, "nowino": {"winograd": "off"}, "always": {"winograd": "always"}}
_GEMM = re.compile(r"^matmul\d*$")
_TRANSFORM = re.compile(r"^(winograd_data\d*|fused_winograd_output\d*(_.*)?)$")
_DIRECT = re.compile(r"^fused_conv2d\d*(_.*)?$")


def _knobs(variant: str) -> Optional[dict]:
    return _VARIANT_KNOBS.get(variant.rsplit(".", 1)[-1])


@functools.lru_cache(maxsize=None)
def _kernels(model: str, batch: int, knobs: Tuple[Tuple[str, str], ...], profile: str) -> Dict[str, tuple]:
    """``{kernel: (modelled us or None, parameter bytes, 3x3 stride-1 conv or not, a batched GEMM's
    FLOPs or 0)}`` of the build."""
    import tvm  # pylint: disable=import-outside-toplevel
    import tvm_fusion_hw as hw  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.bundle.model_import import import_model  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.pipeline import fused_module  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.schedules.planners import kernel_plan  # pylint: disable=import-outside-toplevel
    target = hw.target(profile)
    fused = fused_module(import_model(model, batch)[1], target, hw.fusion_pass(target, **dict(knobs)))
    out = {}
    for gvar, func in fused.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        shapes = [[int(d) for d in p.ty.shape] for p in func.params if hasattr(p.ty, "shape")]
        nbytes = sum(math.prod(s) * 4 for s in shapes)
        plan = kernel_plan(func, target)
        out[gvar.name_hint] = (plan.time_s * 1e6 if plan and plan.time_s else None, nbytes, _is_3x3_same(shapes),
                               _batched_gemm_flops(shapes))
    return out


def _batched_gemm_flops(shapes: List[List[int]]) -> int:
    """FLOPs of ``[S, M, K] x [S, K, N] -> [S, M, N]``, or 0 for buffers of another shape."""
    if len(shapes) != 3 or any(len(s) != 3 for s in shapes):
        return 0
    (batch, rows, depth), (_, depth_b, cols), out = shapes
    return 2 * batch * rows * cols * depth if depth == depth_b and out == [batch, rows, cols] else 0


def _is_3x3_same(shapes: List[List[int]]) -> bool:
    """Whether the kernel's buffers are a 3x3 stride-1 conv's: data, an [O, C, 3, 3] weight, an output
    of the data's size (padding 1) or 2 less (none)."""
    if len(shapes) < 3 or len(shapes[0]) != 4 or len(shapes[1]) != 4 or len(shapes[-1]) != 4:
        return False
    data, weight, out = shapes[0], shapes[1], shapes[-1]
    return weight[2:] == [3, 3] and weight[1] == data[1] and out[1] == weight[0] and \
        out[2] - data[2] in (0, -2) and out[3] - data[3] in (0, -2)


def rows(results: Sequence[dict], profile: str) -> Dict[str, list]:
    """The calibration's row lists over every (model, batch, variant) of ``results``."""
    from tvm_fusion_hw.hardware.profile import load_profile  # pylint: disable=import-outside-toplevel
    measured_on = load_profile(profile)  # the GPU of the run
    memory_bound = measured_on.ridge_point_flop_per_byte / 4
    bandwidth = measured_on.dram_bytes_per_s  # recorded in each row its bytes bound
    fused, apart, streaming, smallest, gemm_streaming = [], [], [], [], []
    for row in results:
        for variant, prof in (row.get("kernels") or {}).items():
            knobs = _knobs(variant)
            if knobs is None or not prof:
                continue
            plans = _kernels(row["model"], row["batch"], tuple(sorted(knobs.items())), profile)
            tag = f"{row['model'].split(':')[-1]} b{row['batch']}"
            for k in prof["all"]:
                name, measured = k["name"], k["us_per_call"]
                modelled, nbytes, direct, flops = plans.get(name, (None, 0, False, 0))
                if _GEMM.match(name) and modelled and knobs.get("winograd") != "off":
                    fused.append((f"{tag} {name}", round(measured, 2), round(modelled, 2)))
                    if flops and flops / nbytes <= memory_bound:
                        gemm_streaming.append((f"{tag} {name}", nbytes, round(measured, 2), bandwidth))
                elif _DIRECT.match(name) and direct and modelled and knobs.get("winograd") == "off":
                    apart.append((f"{tag} {name}", round(measured, 2), round(modelled, 2)))
                elif _TRANSFORM.match(name) and row["batch"] > 1:
                    streaming.append((f"{tag} {name}", nbytes, round(measured, 2), bandwidth))
                elif _TRANSFORM.match(name):
                    smallest.append((f"{tag} {name}", round(measured, 2)))
    # one row per distinct kernel of a model (hw and always builds repeat them)
    return {key: sorted(set(val)) for key, val in
            zip(ROW_KEYS, (fused, apart, streaming, smallest, gemm_streaming))}


#: the row lists of a calibration file, in its order
ROW_KEYS = ("fused", "apart", "streaming", "smallest", "gemm_streaming")


def _as_json(source: str, found: Dict[str, list]) -> str:
    """The rows as JSON, one row a line."""
    parts = [f"  {json.dumps(key)}: [\n" + ",\n".join(f"    {json.dumps(row)}" for row in val) + "\n  ]"
             for key, val in found.items()]
    return "{\n" + f"  \"source\": {json.dumps(source)},\n" + ",\n".join(parts) + "\n}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("results", nargs="+", help="results.json files of runs with --kernel-profile")
    parser.add_argument("--profile", default="nvidia-h200")
    parser.add_argument("--write", help="write the rows here as JSON (tvm_fusion_hw/fusion/calibration_data/)")
    parser.add_argument("--source", default="", help="where the run and the models come from, for the file")
    parser.add_argument("--keys", nargs="+", choices=ROW_KEYS,
                        help="rewrite only these row lists of the existing --write file")
    parser.add_argument("--batches", nargs="+", type=int, help="only these batches of the results")
    args = parser.parse_args(argv)
    if args.keys and not (args.write and Path(args.write).is_file()):
        parser.error("--keys updates an existing file: give it with --write")
    results = []
    for path in args.results:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        results += data["rows"] if isinstance(data, dict) else data
    if args.batches:
        results = [row for row in results if row["batch"] in args.batches]
    found = rows(results, args.profile)
    source = args.source
    if args.keys:
        kept = json.loads(Path(args.write).read_text(encoding="utf-8"))
        source = args.source or kept["source"]
        found = {key: found[key] if key in args.keys else kept.get(key, []) for key in ROW_KEYS}
    text = _as_json(source, found)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        print(text, end="")
    for key in ("fused", "apart"):
        ratios = [m / p for _, m, p in found[key]]
        if ratios:
            print(f"# {key}: {len(ratios)} kernels, measured / modelled median {statistics.median(ratios):.2f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f})", file=sys.stderr)
    if found["streaming"]:
        eff = [b / (us * 1e-6) / bw for _, b, us, bw in found["streaming"]]
        print(f"# transforms: {len(eff)}, DRAM efficiency median {statistics.median(eff):.2f}", file=sys.stderr)
    if found["gemm_streaming"]:
        eff = [b / (us * 1e-6) / bw for _, b, us, bw in found["gemm_streaming"]]
        print(f"# memory-bound GEMMs: {len(eff)}, DRAM efficiency median {statistics.median(eff):.2f}", file=sys.stderr)
    if found["smallest"]:
        print(f"# batch-1 transforms: median {statistics.median(us for _, us in found['smallest']):.2f} us",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
