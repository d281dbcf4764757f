#!/usr/bin/env python3
"""Our kernels against PyTorch's, matched by their FLOPs: where a model loses to torch, part by part.

Joins three files of one model and batch: the runner's ``--kernel-profile`` results (each of our
kernels timed alone), the bundle's fusion report for that model (each kernel's FLOPs: its group's)
and ``bench/torch_kernels.py``'s profile (PyTorch's ops with their input shapes). A GEMM-like
PyTorch op (``addmm``, ``mm``, ``bmm``, ``baddbmm``) counts ``2 M N K`` FLOPs from its shapes; each
of our kernels is matched to the op of the same FLOPs within ``--tolerance`` (an epilogue adds a
few), and called as often. What matches nothing is listed apart (attention: PyTorch's one fused
kernel against our scores, softmax and ``. V``; PyTorch's element-wise kernels, which ours fuse)::

    python bench/torch_compare.py --kernels kprof/results.json --report corpus_deit_tiny_b32_report.json.xz \\
        --torch torchk/torch_kernels.json --model deit_tiny --batch 32
"""

from __future__ import annotations

import argparse
import ast
import json
import lzma
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

#: PyTorch ops whose FLOPs their input shapes give: (op, index of the left matrix's shape)
GEMM_OPS = {"aten::addmm": 1, "aten::mm": 0, "aten::bmm": 0, "aten::baddbmm": 1}


def read_json(path: Path):
    """A JSON file, or an xz-compressed one (``.xz``)."""
    data = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
    return json.loads(data)


def op_flops(name: str) -> Optional[float]:
    """FLOPs of one call of a profiled op named ``"aten::addmm [[768], [6304, 192], [192, 768], ...]"``
    (``torch_kernels.py``'s op key and input shapes), or None for an op that is not a GEMM."""
    op, _, shapes = name.partition(" ")
    if op not in GEMM_OPS or not shapes:
        return None
    try:
        dims = ast.literal_eval(shapes)
    except (ValueError, SyntaxError):
        return None
    at = GEMM_OPS[op]
    if not isinstance(dims, list) or len(dims) < at + 2:
        return None
    left, right = dims[at], dims[at + 1]
    if len(left) < 2 or len(right) < 2:
        return None
    batch = math.prod(left[:-2])
    return 2.0 * batch * left[-2] * left[-1] * right[-1]


def compare(ours: List[dict], kernel_flops: Dict[str, float], theirs: List[dict],
            tolerance: float = 0.02) -> Tuple[List[dict], List[dict], List[dict]]:
    """``(matched, ours alone, theirs alone)``: each of our kernels (``{"name", "us", "calls"}``)
    with a FLOP count joined to the PyTorch GEMM op of the same FLOPs a call and the same calls;
    rows ``{"kernel", "op", "calls", "ours_us", "torch_us"}`` (per call), largest of ours first."""
    gemms = [dict(op, flops=op_flops(op["name"])) for op in theirs]
    gemms = [op for op in gemms if op["flops"]]
    matched, alone, used = [], [], set()
    for kernel in sorted(ours, key=lambda k: -k["us"]):
        flops = kernel_flops.get(kernel["name"], 0.0) / max(kernel["calls"], 1)
        found = next((i for i, op in enumerate(gemms) if i not in used and flops and op["calls"] == kernel["calls"]
                      and abs(op["flops"] - flops) <= tolerance * op["flops"]), None)
        if found is None:
            alone.append(kernel)
            continue
        used.add(found)
        op = gemms[found]
        matched.append({"kernel": kernel["name"], "op": op["name"], "calls": kernel["calls"],
                        "ours_us": kernel["us"] / kernel["calls"], "torch_us": op["us"] / op["calls"]})
    return matched, alone, [op for i, op in enumerate(gemms) if i not in used]


def kernel_flops_of(report: dict) -> Dict[str, float]:
    """Each kernel's FLOPs over all its calls, from a fusion report's groups."""
    flops: Dict[str, float] = {}
    for group in report["groups"]:
        flops[group["kernel"]] = flops.get(group["kernel"], 0.0) + float(group["flops"])
    return flops


def markdown(title: str, matched: List[dict], alone: List[dict], theirs_alone: List[dict]) -> str:
    """The comparison as markdown: matched GEMMs with the ratio, then what matched nothing."""
    lines = [f"## {title}", "", "| our kernel | PyTorch op | calls | ours us | torch us | ours / torch |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in matched:
        lines.append(f"| `{row['kernel'][:70]}` | `{row['op'][:70]}` | {row['calls']:g} | {row['ours_us']:.1f} | "
                     f"{row['torch_us']:.1f} | {row['ours_us'] / row['torch_us']:.2f}x |")
    lines += ["", "Ours, no PyTorch GEMM of the same FLOPs (us a call x calls): " +
              (", ".join(f"`{k['name'][:60]}` {k['us'] / max(k['calls'], 1):.1f} x {k['calls']:g}" for k in alone)
               or "none"), "",
              "PyTorch's GEMMs left: " + (", ".join(f"`{op['name'][:60]}` {op['us'] / op['calls']:.1f} x {op['calls']:g}"
                                                   for op in theirs_alone) or "none"), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", required=True, type=Path, help="the runner's results.json (--kernel-profile)")
    ap.add_argument("--report", required=True, type=Path, help="the bundle's fusion report (.json or .json.xz)")
    ap.add_argument("--torch", required=True, type=Path, help="torch_kernels.py's torch_kernels.json")
    ap.add_argument("--model", required=True, help="corpus model name (e.g. deit_tiny)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--variant", default="hw", help="our library whose kernels to compare (default hw)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="relative FLOP difference that still matches")
    args = ap.parse_args(argv)
    rows = [r for r in read_json(args.kernels)["rows"]
            if r["model"] in (args.model, f"corpus:{args.model}") and r["batch"] == args.batch]
    profiles = [p for p in read_json(args.torch) if p["model"] == args.model and p["batch"] == args.batch
                and p["mode"] == "eager"]
    if not rows or args.variant not in rows[0].get("kernels", {}) or not profiles:
        raise SystemExit(f"{args.model} b{args.batch}: no {args.variant} kernel profile in {args.kernels} "
                         f"or no eager PyTorch profile in {args.torch}")
    ours = rows[0]["kernels"][args.variant]["all"]
    matched, alone, theirs = compare(ours, kernel_flops_of(read_json(args.report)), profiles[0]["ops"],
                                     args.tolerance)
    print(markdown(f"{args.model} b{args.batch}: {args.variant} against PyTorch eager ({profiles[0]['gpu']})",
                   matched, alone, theirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
