#!/usr/bin/env python3
"""Each kernel's measured time against its roofline bound, here (no GPU): where a model's time is
lost to kernels that run far from what their bytes and FLOPs allow.

Joins a bundle run's per-kernel times (``run.py --kernel-profile``: ``results.json``) with the
fusion report the bundle wrote for the same build (its groups' FLOPs and compulsory bytes, per
kernel). A kernel's bound is ``max(bytes / DRAM bandwidth, FLOPs / FP32 peak)`` on the bundle's
profile; its efficiency the bound over the measured time. Kernels of no fusion group (the
weights' layout transforms, dlight-only kernels) have no bound ("-")::

    python bench/kernel_roofline.py --results res/kprof/results.json --bundle .bundle_emu11 \\
        [--variant hw] [--out roofline.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple


def group_costs(report: dict) -> Dict[str, Tuple[float, float]]:
    """``{kernel: (FLOPs, compulsory bytes)}`` of one call, from a fusion report's groups (a kernel
    that several groups call has the same figures in each)."""
    return {g["kernel"]: (float(g.get("flops") or 0), float(g.get("compulsory_bytes") or 0))
            for g in report.get("groups", []) if g.get("kernel")}


def bound_s(flops: float, nbytes: float, profile) -> Tuple[float, str]:
    """The roofline bound of one call (the explanation's ``roofline_seconds``) and what sets it
    ("memory" or "compute")."""
    # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.explain.collect import roofline_seconds

    seconds = roofline_seconds(flops, nbytes, profile)
    return seconds, "memory" if seconds == nbytes / profile.dram_bytes_per_s else "compute"


def rows_of(kernels: List[dict], costs: Dict[str, Tuple[float, float]], profile) -> List[dict]:
    """Per measured kernel: calls, us per call, the bound (us per call, what sets it), efficiency."""
    out = []
    for k in kernels:
        row = {"name": k["name"], "calls": k["calls"], "us_per_call": k["us_per_call"], "us": k["us"]}
        if k["name"] in costs:
            seconds, by = bound_s(*costs[k["name"]], profile)
            row.update(bound_us=seconds * 1e6, by=by,
                       efficiency=seconds * 1e6 / k["us_per_call"] if k["us_per_call"] > 0 else None)
        out.append(row)
    return out


def table(rows: List[dict], title: str) -> str:
    """A markdown section: the kernels by measured time, then the totals of those with a bound."""
    lines = [f"## {title}", "", "| kernel | calls | us a call | bound us a call | bound by | efficiency | us |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        bound = f"{r['bound_us']:.2f}" if "bound_us" in r else "-"
        eff = f"{r['efficiency']:.0%}" if r.get("efficiency") is not None else "-"
        lines.append(f"| `{r['name']}` | {r['calls']} | {r['us_per_call']:.2f} | {bound} | {r.get('by', '-')} "
                     f"| {eff} | {r['us']:.1f} |")
    bounded = [r for r in rows if "bound_us" in r]
    measured = sum(r["us"] for r in bounded)
    ideal = sum(r["bound_us"] * r["calls"] for r in bounded)
    if measured > 0:
        lines += ["", f"Kernels with a bound: {len(bounded)} of {len(rows)}, {measured:.1f} us measured "
                      f"against {ideal:.1f} us of bounds ({ideal / measured:.0%}); the rest "
                      f"{sum(r['us'] for r in rows) - measured:.1f} us."]
    return "\n".join(lines) + "\n"


def report(results: dict, bundle: Path, variant: str = "hw") -> str:
    """Every row of ``results`` with a kernel profile of ``variant``."""
    # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.hardware.profile import load_profile

    manifest = json.loads((bundle / "manifest.json").read_text())
    prof = load_profile(manifest["profile"])
    entries = {(e["model"], e["batch"]): e for e in manifest["entries"]}
    parts = [f"# Kernels against their roofline bounds ({prof.display_name} figures; measured on "
             f"{results.get('system', {}).get('gpu', '?')})", ""]
    for row in results.get("rows", []):
        profile_of = (row.get("kernels") or {}).get(variant)
        entry = entries.get((row["model"], row["batch"]))
        if not profile_of or entry is None:
            continue
        name = entry.get("report") if variant == "hw" else next(
            (v.get("report") for v in entry["variants"] if v["name"] == variant), None)
        costs = group_costs(json.loads((bundle / name).read_text())) if name else {}
        rows = rows_of(profile_of["all"], costs, prof)
        parts.append(table(rows, f"{row['model']} b{row['batch']}, {variant}"))
    return "\n".join(parts)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, type=Path, help="results.json of run.py --kernel-profile")
    ap.add_argument("--bundle", required=True, type=Path, help="the bundle that was run (its manifest, its reports)")
    ap.add_argument("--variant", default="hw", help="the library whose kernels to show (default hw)")
    ap.add_argument("--out", type=Path, help="markdown file (default: stdout)")
    args = ap.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
        text = report(results, args.bundle, args.variant)
    except (OSError, ValueError, KeyError) as err:
        sys.exit(f"kernel_roofline: {type(err).__name__}: {err}")
    (args.out.write_text if args.out else sys.stdout.write)(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
