#!/usr/bin/env python3
"""Nsight Compute's raw page (``ncu --csv --page raw``) as a markdown table: per kernel launch, where
its time goes, here (no GPU).

Per launch: the duration (at the clock ncu locked, its base clock by default), SM and FMA-pipe
throughput, achieved occupancy, registers, the shared-memory load wavefronts and bank conflicts,
and the three largest warp stall reasons (cycles a warp stalls per issued instruction, from the
Warp State section's ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``). A
metric the sections did not collect is "-". With ``--sweep``, each launch is named by the tile
sweep variant it ran (``tile_sweep.py run --once`` launches every variant once, in
``sweep.json``'s order)::

    python bench/ncu_table.py res/gemmprof/ncu.csv --sweep .bundle_gemmprof/sweep.json --out ncu.md
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

#: (column title, metric, scale to the shown unit)
COLUMNS = (
    ("us", "gpu__time_duration.sum", 1e-3),  # ns -> us (--print-units base)
    ("SM %", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    ("FMA pipe %", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", 1.0),
    ("occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1.0),
    ("registers", "launch__registers_per_thread", 1.0),
    ("shared ld wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 1.0),
    ("shared ld conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 1.0),
)
#: (column title, what it is computed from): shown where the run collected its metrics
DERIVED = (
    # the share of issued warp instructions that are FFMAs (a thread's FFMAs over 32 lanes)
    ("FFMA % of issued", lambda m: 100 * m["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] / 32
     / m["smsp__inst_executed.sum"]),
    ("SM GHz", lambda m: m["sm__cycles_elapsed.avg.per_second"] / 1e9),
)
_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def csv_rows(text: str) -> List[List[str]]:
    """The CSV rows of ncu's ``--csv`` output (its own ``==PROF==`` lines are not CSV)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def read_raw_page(text: str) -> Tuple[List[Dict[str, str]], Dict[str, str]]:
    """ncu's raw CSV page: one ``{metric: value}`` per launch, in launch order, and ``{metric:
    unit}`` from its units row (empty where there is none)."""
    rows = csv_rows(text)
    if not rows:
        return [], {}
    head, body, units = rows[0], rows[1:], {}
    if body and not body[0][head.index("ID")].strip().isdigit():
        units, body = dict(zip(head, body[0])), body[1:]
    return [dict(zip(head, row)) for row in body], units


def read_raw(text: str) -> List[Dict[str, str]]:
    """The launches of ncu's raw CSV page (:func:`read_raw_page` without the units)."""
    return read_raw_page(text)[0]


def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def stalls(launch: Dict[str, str], top: int = 3) -> List[tuple]:
    """The ``top`` largest stall reasons, ``[(reason, cycles per issued instruction)]``."""
    found = [(m.group(1), _number(v)) for k, v in launch.items() if (m := _STALL.match(k))]
    return sorted((r for r in found if r[1]), key=lambda r: -r[1])[:top]


def table(launches: List[Dict[str, str]], names: Optional[List[str]] = None) -> str:
    """The markdown table (``names``: one per launch, else ncu's kernel names)."""
    derived = [(title, f) for title, f in DERIVED if any(_derived(launch, f) is not None for launch in launches)]
    head = ["launch"] + [title for title, _, _ in COLUMNS] + [title for title, _ in derived] + \
        ["top stalls (cycles per issue)"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(COLUMNS) + len(derived)) + " --- |"]
    for i, launch in enumerate(launches):
        name = names[i] if names and i < len(names) else launch.get("Kernel Name", "?")
        cells = []
        for _, metric, scale in COLUMNS:
            value = _number(launch.get(metric))
            cells.append("-" if value is None else f"{value * scale:.4g}")
        for _, f in derived:
            value = _derived(launch, f)
            cells.append("-" if value is None else f"{value:.4g}")
        top = ", ".join(f"{r} {v:.2f}" for r, v in stalls(launch)) or "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {top} |")
    return "\n".join(lines)


def _derived(launch: Dict[str, str], f) -> Optional[float]:
    """A :data:`DERIVED` column of one launch, or None where a metric it needs is missing."""
    try:
        return f({k: _number(v) for k, v in launch.items()})
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def sweep_names(sweep: Path) -> List[str]:
    """``case variant: summary`` per launch of a tile sweep's ``--once`` run, in launch order: a
    split-K tile launches its GEMM, then the sum of its parts."""
    data = json.loads(sweep.read_text())
    names = []
    for case in data["cases"]:
        for v in case["variants"]:
            names.append(f"{case['case']} {v['name']}: {v['summary'][:60]}")
            if (v.get("tile") or {}).get("split_k", 1) > 1:
                names.append(f"{case['case']} {v['name']}: its split-K sum")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="ncu --csv --page raw output")
    ap.add_argument("--sweep", type=Path, help="the tile sweep's sweep.json: name each launch by its variant")
    ap.add_argument("--first", action="store_true",
                    help="the CSV holds the sweep's first launches only (ncu -c): name those")
    ap.add_argument("--out", type=Path, help="markdown file (default: stdout)")
    args = ap.parse_args(argv)
    try:
        launches = read_raw(args.csv.read_text())
    except OSError as err:
        sys.exit(f"ncu_table: cannot read {args.csv}: {err.strerror}")
    if not launches:
        sys.exit(f"ncu_table: no launches in {args.csv} (not ncu's --csv --page raw output?)")
    names = sweep_names(args.sweep) if args.sweep else None
    # a run cut short by ncu's --launch-count (-c) profiled the sweep's first launches
    if names and len(names) > len(launches) and args.first:
        names = names[:len(launches)]
    if names and len(names) != len(launches):
        print(f"ncu_table: {len(launches)} launches in {args.csv}, {len(names)} expected from {args.sweep}: "
              "launches named by kernel", file=sys.stderr)
        names = None
    text = table(launches, names) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
