"""A pair template's model against the H200 (issue 15): the figures of ``fusion.pair_cost``'s
calibration, from a run's per-kernel times.

For each case (a model built with hw's plan, where the pair is fused, and with a variant that keeps
it apart), every kernel the pair template schedules (``--template``) that the apart build does not
have is matched with its modelled time (the tile summary's "model X us", :func:`tvm_fusion_hw.schedule_report.explain_schedules` on this checkout)
and its measured time per call (the runner's ``--kernel-profile``); so is each producer kernel of
the apart build (the fused kernel's name starts with it; for a GEMM prologue, the contraction's
kernel, whose ops end the fused kernel's name) with its own template's model. Prints
the rows as ``fusion/pair_cost.py``'s :class:`Calibration` takes them, and a table.

    python bench/pair_calibration.py --results R/emu/results.json R/cases/results.json \\
        --case corpus:vgg11_bn:vgg11_bn.apart:fuse_complex_pairs=false \\
        --case conv_relu_pool:cp_apart:fuse_complex_pairs=false --template ConvPool
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence


def _modelled(model: str, batch: int, profile: str, knobs: Dict[str, object]) -> Dict[str, tuple]:
    """``{kernel: (rule, modelled us or None)}`` of ``model`` as the pipeline schedules it."""
    import tvm_fusion_hw as hw  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.schedule_report import explain_schedules  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.bundle.model_import import import_model  # pylint: disable=import-outside-toplevel
    target = hw.target(profile)
    mod = import_model(model, batch)[1]  # as the bundle built it: weights lifted
    out = {}
    for choice in explain_schedules(mod, target, hw.fusion_pass(target, **knobs)):
        found = re.search(r"model ([\d.]+) us", choice.detail)
        out[choice.kernel] = (choice.rule, float(found.group(1)) if found else None)
    return out


def _measured(rows: List[dict], model: str, batch: int, variant: str) -> Dict[str, float]:
    """``{kernel: us per call}`` of ``variant``'s kernel profile."""
    for row in rows:
        if row["model"] == model and row["batch"] == batch:
            prof = (row.get("kernels") or {}).get(variant)
            if prof:
                return {k["name"]: k["us_per_call"] for k in prof["all"]}
    return {}


def _knob(text: str) -> Dict[str, object]:
    key, value = text.split("=", 1)
    return {key: {"true": True, "false": False}.get(value.lower(), value)}


def calibrate(rows: List[dict], cases: Sequence[str], template: str, batches: Sequence[int],
              profile: str) -> dict:
    """The fused and apart rows of every case and batch."""
    fused_rows, apart_rows, streaming_rows = [], [], []
    for case in cases:
        *model, apart_variant, knob = case.split(":")
        model = ":".join(model)
        for batch in batches:
            fused_model = _modelled(model, batch, profile, {})
            apart_model = _modelled(model, batch, profile, _knob(knob))
            fused_time = _measured(rows, model, batch, "hw")
            apart_time = _measured(rows, model, batch, apart_variant)
            short = model.split(":")[-1]
            for kernel, (rule, us) in fused_model.items():
                if rule != template or us is None or kernel not in fused_time or kernel in apart_model:
                    continue
                fused_rows.append((f"{short} b{batch} {kernel}", fused_time[kernel], us))
                # the part the template runs apart: a pair's producer (the fused name starts with
                # it), else a prologue's contraction (the fused name ends with its ops)
                producer = max((k for k in apart_model if kernel.startswith(k + "_")), key=len, default=None) \
                    or max((k for k in apart_model if k.startswith("fused_") and apart_model[k][0] == template
                            and kernel.endswith("_" + k[len("fused_"):])), key=len, default=None)
                if producer and apart_model[producer][1] is not None and producer in apart_time:
                    apart_rows.append((f"{short} b{batch} {producer} ({apart_model[producer][0]})",
                                       apart_time[producer], apart_model[producer][1]))
                # a prologue's producer apart: a streaming kernel (its name begins the fused one's)
                for part in apart_model:
                    if part not in fused_model and part in apart_time and batch >= 32 \
                            and kernel[len("fused_"):].startswith(part.removeprefix("fused_") + "_"):
                        nbytes = _kernel_bytes(model, batch, profile, knob)[part]
                        streaming_rows.append((f"{short} b{batch} {part}", nbytes, apart_time[part]))
    return {"fused": fused_rows, "apart": apart_rows, "streaming": streaming_rows}


@functools.lru_cache(maxsize=None)
def _kernel_bytes(model: str, batch: int, profile: str, knob: str) -> Dict[str, int]:
    """``{kernel: bytes of its parameters}`` built with ``knob``: what a streaming kernel must read
    and write."""
    import tvm  # pylint: disable=import-outside-toplevel
    import tvm_fusion_hw as hw  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.bundle.model_import import import_model  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.pipeline import fused_module  # pylint: disable=import-outside-toplevel
    target = hw.target(profile)
    fused = fused_module(import_model(model, batch)[1], target, hw.fusion_pass(target, **_knob(knob)))
    out = {}
    for gvar, func in fused.functions.items():
        types = [getattr(param, "ty", None) for param in getattr(func, "params", [])]
        if types and all(hasattr(ty, "shape") for ty in types):  # a PrimFunc: its buffers' types
            out[gvar.name_hint] = sum(math.prod(int(d) for d in ty.shape) * tvm.DataType(ty.dtype).bits // 8
                                      for ty in types)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", nargs="+", required=True, help="runner results.json with --kernel-profile")
    ap.add_argument("--case", action="append", required=True,
                    help="MODEL:APART_VARIANT:KNOB=VALUE (the knob that keeps the pair apart)")
    ap.add_argument("--template", required=True, help="the pair template's rule name (ConvPool)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    ap.add_argument("--profile", default="nvidia-h200")
    args = ap.parse_args(argv)
    rows = [r for path in args.results for r in json.loads(Path(path).read_text()).get("rows", [])]
    result = calibrate(rows, args.case, args.template, args.batches, args.profile)
    print("| kernel | side | measured us | modelled us | measured / modelled |")
    print("| --- | --- | ---: | ---: | ---: |")
    for side in ("fused", "apart"):
        for name, measured, modelled in result[side]:
            print(f"| {name} | {side} | {measured:.2f} | {modelled:.2f} | {measured / modelled:.2f} |")
    if result["streaming"]:
        print("\n| streaming kernel | bytes | measured us | fraction of 4.8 TB/s |")
        print("| --- | ---: | ---: | ---: |")
        for name, nbytes, measured in result["streaming"]:
            print(f"| {name} | {nbytes} | {measured:.2f} | {nbytes / (measured * 1e-6) / 4.8e12:.2f} |")
    print("\n# for fusion/pair_cost.py's Calibration")
    for side in ("fused", "apart"):
        print(f"{side}=(")
        for name, measured, modelled in result[side]:
            print(f"    ({name!r}, {measured:.2f}, {modelled:.2f}),")
        print("),")
    return 0


if __name__ == "__main__":
    sys.exit(main())
