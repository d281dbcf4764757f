"""The speed table of a GPU run: per model, stock / hw / hw+graphs / PyTorch latencies and ratios.

    python bench/speed_table.py --results b32A/results.json b32B/results.json [--before OLD.json ...] > speed.md

Ratios are the plugin with CUDA graphs (``hw_graph``) against stock TVM (over the rows where stock
builds) and against ``torch.compile(mode="reduce-overhead")`` (``compile_graphs``, timed in the
same run, unless ``--torch-from`` names another run's results: a ``--torch-only`` run whose PyTorch
times are joined to the rows, which the table then says). "roofline": the model's roofline bound
(the sum over its fusion groups of max(FLOPs / peak, compulsory bytes / bandwidth) on the bundle's
profile, the runner's ``roofline_s``) over the ``hw_graph`` latency. ``--before``: an earlier
run's results; a column gives its ``hw_graph`` latency.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Dict, List, Optional, Sequence


def load_rows(paths: Sequence[str]) -> Dict[tuple, dict]:
    """{(model, batch): row} of runner results files (a later file's row replaces an earlier one's)."""
    rows = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for row in json.load(f)["rows"]:
                rows[(row["model"].removeprefix("corpus:"), row["batch"])] = row
    return rows


def join_torch(rows: Dict[tuple, dict], torch_rows: Dict[tuple, dict]) -> int:
    """Add the PyTorch times of ``torch_rows`` (a ``--torch-only`` run) to ``rows`` that have none;
    returns how many rows were joined."""
    joined = 0
    for key, row in rows.items():
        other = torch_rows.get(key)
        times = row.setdefault("times_s", {})
        if other and not any(k in times for k in ("eager", "compile_graphs")):
            for name in ("eager", "compile", "compile_graphs"):
                if name in other.get("times_s", {}):
                    times[name] = other["times_s"][name]
            joined += 1
    return joined


def _ms(row: Optional[dict], key: str) -> Optional[float]:
    value = (row or {}).get("times_s", {}).get(key)
    return None if value is None else value * 1e3


def _geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def table(rows: Dict[tuple, dict], before: Dict[tuple, dict]) -> str:
    """The markdown table and its summary lines."""
    cols = ["stock", "hw", "hw_graph", "eager", "compile_graphs"]
    head = ["model", "batch", "stock", "hw", "hw+graph", "torch eager", "torch.compile+graphs",
            "hw+graph vs stock", "vs torch.compile+graphs", "roofline"] + (["hw+graph before"] if before else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" + " ---: |" * (len(head) - 1)]
    vs_stock, vs_torch = [], []
    for key in sorted(rows):  # the rows of this run (a row only in ``before`` is not listed)
        row = rows[key]
        t = {c: _ms(row, c) for c in cols}
        cells = [key[0], str(key[1])] + [f"{t[c]:.3f}" if t[c] else "-" for c in cols]
        if t["hw_graph"] and t["stock"]:
            vs_stock.append(t["stock"] / t["hw_graph"])
            cells.append(f"{vs_stock[-1]:.2f}x")
        else:
            cells.append("- (stock fails)" if t["hw_graph"] else "-")
        if t["hw_graph"] and t["compile_graphs"]:
            vs_torch.append(t["compile_graphs"] / t["hw_graph"])
            cells.append(f"{vs_torch[-1]:.2f}x")
        else:
            cells.append("-")
        bound = row.get("roofline_s")
        cells.append(f"{bound * 1e3 / t['hw_graph']:.0%}" if bound and t["hw_graph"] else "-")
        if before:
            old = _ms(before.get(key), "hw_graph")
            cells.append(f"{old:.3f}" if old else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if vs_stock:
        lines.append(f"hw+graph vs stock: geomean {_geomean(vs_stock):.2f}x over {len(vs_stock)} rows, "
                     f"min {min(vs_stock):.2f}x")
    if vs_torch:
        lines.append(f"hw+graph vs torch.compile+graphs: geomean {_geomean(vs_torch):.2f}x over {len(vs_torch)} "
                     f"rows, at or ahead on {sum(v >= 1.0 for v in vs_torch)}, min {min(vs_torch):.2f}x")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", required=True, help="runner results.json files")
    ap.add_argument("--before", nargs="+", default=[], help="an earlier run's results.json files")
    ap.add_argument("--torch-from", nargs="+", default=[],
                    help="a --torch-only run's results.json: its PyTorch times join rows that have none")
    args = ap.parse_args(argv)
    rows = load_rows(args.results)
    joined = join_torch(rows, load_rows(args.torch_from)) if args.torch_from else 0
    print(table(rows, load_rows(args.before) if args.before else {}))
    if joined:
        print(f"\nPyTorch columns of {joined} rows from another call ({', '.join(args.torch_from)}): "
              "the same GPU and software, not the same process.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
