"""The corpus table of a GPU run: per model and batch, built, matches, kernels on a template.

Reads the runner's ``results.json`` files (``--results DIR ...``, each a ``run.py --out`` folder)
and ``bench/corpus_schedules.py``'s JSON (``--schedules``); prints Markdown.
"""

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", required=True)
    ap.add_argument("--schedules")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    rows = {}
    for folder in args.results:
        for row in json.loads((Path(folder) / "results.json").read_text())["rows"]:
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
        finite = "yes" if all(v.get("finite", True) for v in acc.values()) else "**NaN (stock too)**"
        s = sched.get((model, batch))
        kernels = f"{s['on_template']} / {s['on_dlight']}" if s else "-"
        print(f"| {model} | {batch} | {stock} | {hw} | {vs_stock} | {vs_ort} | {finite} | {kernels} |")


if __name__ == "__main__":
    main()
