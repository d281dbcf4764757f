"""The corpus table of a GPU run: per model and batch, built, matches, kernels on a template.

Reads the runner's ``results.json`` files (``--results DIR ...``, each a ``run.py --out`` folder),
or its log where a run's results.json did not come back (``--logs FILE ...``: the lines
"MODEL bB: LIB T ms, rel err E" and "MODEL bB: against onnxruntime LIB E, ..."), later ones
overriding earlier ones, and ``bench/corpus_schedules.py``'s JSON (``--schedules``); prints Markdown.
"""

import argparse
import json
import re
from pathlib import Path

_TIMED = re.compile(r"\] (\S+) b(\d+): (\w+) ([\d.]+) ms, rel err (\S+)$")
_AGAINST = re.compile(r"\] (\S+) b(\d+): against onnxruntime (.*)$")


def _row(rows: dict, model: str, batch: int) -> dict:
    return rows.setdefault((model, batch), {"model": model, "batch": batch, "accuracy": {},
                                            "accuracy_onnxruntime": {}, "times_s": {}})


def rows_of_log(path: Path) -> dict:
    """Result rows (the fields this table reads) from a runner log."""
    rows: dict = {}
    for line in path.read_text().splitlines():
        if (timed := _TIMED.search(line)):
            model, batch, lib, ms, err = timed.groups()
            row = _row(rows, model, int(batch))
            row["accuracy"][lib] = {"rel_l2": float(err), "finite": err != "nan"}
            row["times_s"][lib] = float(ms) / 1e3
        elif (against := _AGAINST.search(line)):
            model, batch, pairs = against.groups()
            row = _row(rows, model, int(batch))
            for pair in pairs.split(", "):
                lib, err = pair.rsplit(" ", 1)
                row["accuracy_onnxruntime"][lib] = {"rel_l2": float(err)}
    for row in rows.values():  # against stock, "nan" may be stock's NaN: onnxruntime tells
        for lib, acc in row["accuracy"].items():
            ort = row["accuracy_onnxruntime"].get(lib)
            acc["finite"] = ort["rel_l2"] == ort["rel_l2"] if ort else acc["finite"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", default=[])
    ap.add_argument("--logs", nargs="+", default=[], help="runner logs, read after --results")
    ap.add_argument("--schedules")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    rows = {}
    found = [row for folder in args.results for row in json.loads((Path(folder) / "results.json").read_text())["rows"]]
    found += [row for log in args.logs for row in rows_of_log(Path(log)).values()]
    for row in found:
        if "skipped" in row.get("error", ""):
            continue  # a --time-budget skip says nothing: keep what an earlier run found
        rows[(row["model"].removeprefix("corpus:"), row["batch"])] = row
    sched = {}
    if args.schedules:
        sched = {(r["model"], r["batch"]): r for r in json.loads(Path(args.schedules).read_text())}
    print("| model | batch | stock builds | hw builds | hw vs stock (rel L2) | hw vs onnxruntime | "
          "finite | kernels on a template / dlight |")
    print("| --- | ---: | --- | --- | ---: | ---: | --- | ---: |")
    for (model, batch), row in sorted(rows.items()):
        acc, ort, errors = row.get("accuracy", {}), row.get("accuracy_onnxruntime", {}), row.get("errors", {})
        if not acc and not errors:
            print(f"| {model} | {batch} | not run on the GPU (the session's device time ran out) | | | | | |")
            continue
        stock = "no (dlight's Matmul asserts)" if "stock build" in errors else ("yes" if "stock" in acc else "-")
        hw = "yes" if "hw" in acc else ("no" if "hw build" in errors else "-")
        vs_stock = f"{acc['hw']['rel_l2']:.1e}" if "hw" in acc and "stock" in acc else "-"
        if vs_stock != "-" and acc["hw"]["rel_l2"] > args.rtol:
            vs_stock += " **over 1e-4**"
        vs_ort = f"{ort['hw']['rel_l2']:.1e}" if "hw" in ort else "-"
        hw_finite = acc.get("hw", {}).get("finite", True)
        stock_finite = acc.get("stock", {}).get("finite", True)
        finite = ("yes" if stock_finite else "yes (stock's CUDA build NaN)") if hw_finite else "**NaN**"
        if not stock_finite:
            vs_stock = "- (stock NaN)"
        s = sched.get((model, batch))
        kernels = f"{s['on_template']} / {s['on_dlight']}" if s else "-"
        print(f"| {model} | {batch} | {stock} | {hw} | {vs_stock} | {vs_ort} | {finite} | {kernels} |")


if __name__ == "__main__":
    main()
