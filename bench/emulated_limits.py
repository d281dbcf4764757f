"""The proof by emulated limits (issue 15): does profile P's plan win under P's limits on the H200?

For every (model, batch) where two NVIDIA profiles P and Q fuse differently
(``bench/results/2026-12-01-profile-differences/profile_differences.json``: a pair fused on one,
not on the other), P's plan and Q's plan are both built for the H200 with P's limits
(``--variant NAME:MODEL:fusion_profile=X,limits=P``, see ``tvm_fusion_hw/bundle/emulation.py``)
and timed there. Profiles whose plans are the same on a model share one build, and so do
profiles whose limits are the same (the H100's are the H200's: those builds are plain ``hw``).

    # which builds; the bundle command (or --out DIR to build it here)
    nice python bench/emulated_limits.py plan [--models corpus:mnasnet1_0 ...] [--out .bundle_emu]
    # on the GPU box: the commands `plan` prints (run.py, then ncu over the same bundle)
    # the table
    python bench/emulated_limits.py report --bundle .bundle_emu --results OUT/results.json \\
        [--ncu OUT/dram.csv] --out report.md

Bandwidth cannot be emulated: with an ncu CSV (``dram__bytes_read.sum``, ``dram__bytes_write.sum``
per kernel launch) the report gives each plan's DRAM bytes and its *modelled* time on P's roofline:
the sum over kernels of max(bytes / P's DRAM bandwidth, FLOPs / P's FP32 peak), FLOPs from the
plan's fusion report. Each library's runs are found in the CSV by the kernel order of one ``main``
run (the manifest's ``launches``): the runner runs each library's ``main`` ``--main-runs`` times
(3 with ``--repeat 1 --number 1``: the output run, time_evaluator's warm-up, one timed run). ncu
profiles every launch (no ``-k`` filter: the runs are found by their whole kernel sequence); two
DRAM metrics take one replay pass, with the caches flushed before each kernel (``--cache-control
all``, ncu's default): bytes as a GPU whose L2 holds nothing between kernels would move them.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
DIFFERENCES = HERE / "results" / "2026-12-01-profile-differences" / "profile_differences.json"
#: one small model per decision kind (depthwise -> pointwise, conv -> pool, depth cap)
DEFAULT_MODELS = ("corpus:mnasnet1_0", "corpus:vgg11_bn", "corpus:llama")
DEFAULT_BATCHES = (1, 32)
BUNDLE_PROFILE = "nvidia-h200"
SHORT = {"nvidia-h200": "h200", "nvidia-h100-sxm": "h100", "nvidia-a100-80gb": "a100",
         "nvidia-jetson-agx-orin": "orin", "nvidia-rtx-3060": "3060", "nvidia-rtx-4090": "4090"}
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
#: past this many sets of builds to try, :func:`best_builds` adds one build at a time instead
_MAX_COMBINATIONS = 100_000


def _differences_module():
    spec = importlib.util.spec_from_file_location("profile_differences", HERE / "profile_differences.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ncu_table_module():
    """bench/ncu_table.py, which reads ncu's CSV pages."""
    spec = importlib.util.spec_from_file_location("ncu_table", HERE / "ncu_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _limits_key(name: str) -> Tuple:
    from tvm_fusion_hw.bundle.emulation import LIMIT_FIELDS  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.hardware.profile import load_profile  # pylint: disable=import-outside-toplevel
    prof = load_profile(name)
    return tuple(getattr(prof, f) for f in LIMIT_FIELDS)


# ---- plan ----------------------------------------------------------------------------------
def pairs_of(entry: dict, profiles: Sequence[str]) -> List[dict]:
    """Ordered (P, Q) of ``profiles`` whose plans differ on one (model, batch) entry of
    profile_differences.json, with the decisions that differ and their kind."""
    diff = _differences_module()
    rows = [r for r in entry["differences"] if diff.fusion_differs(r)]
    fused = {p: tuple(r["profiles"].get(p, {}).get("verdict") == "FUSE" for r in rows) for p in profiles}
    out = []
    for p in profiles:
        for q in profiles:
            if p == q or fused[p] == fused[q]:
                continue
            differ = [r for r, a, b in zip(rows, fused[p], fused[q]) if a != b]
            kinds = sorted({diff.kind_of(r) for r in differ})
            out.append({"P": p, "Q": q, "decisions": len(differ), "kinds": kinds,
                        "P_fuses": sum(a and not b for a, b in zip(fused[p], fused[q])),
                        "Q_fuses": sum(b and not a for a, b in zip(fused[p], fused[q]))})
    return out


def plan(differences: dict, models: Sequence[str], batches: Sequence[int], profiles: Sequence[str],
         max_variants: int = 4) -> dict:
    """The builds (variants) and the pairs they answer. A plan is named by the first profile (in
    ``profiles`` order) that fuses the same way, limits by the first with the same limits. Of a
    model's extra builds, the at most ``max_variants`` that answer the most pairs are built
    (:func:`best_builds`); the other pairs are listed as skipped."""
    out = {"bundle_profile": BUNDLE_PROFILE, "profiles": list(profiles), "variants": [], "pairs": []}
    for model in models:
        name = model.split(":", 1)[-1]
        specs: Dict[str, dict] = {}  # every extra build a pair of this model needs, in pair order
        pairs_here = []
        for batch in batches:
            entry = next((e for e in differences["entries"] if e["model"] == name and e["batch"] == batch), None)
            if entry is None:
                continue
            diff = _differences_module()
            rows = [r for r in entry["differences"] if diff.fusion_differs(r)]
            sig = {p: tuple(r["profiles"].get(p, {}).get("verdict") == "FUSE" for r in rows) for p in profiles}
            plan_of = {p: next(x for x in profiles if sig[x] == sig[p]) for p in profiles}
            limits_of = {p: next(x for x in profiles if _limits_key(x) == _limits_key(p)) for p in profiles}
            pairs = pairs_of(entry, profiles)
            # the H200 (the bundle's GPU) in the pair first, then the rest in profile order
            pairs.sort(key=lambda r: (BUNDLE_PROFILE not in (r["P"], r["Q"]), profiles.index(r["P"])))
            for pair in pairs:
                lim = limits_of[pair["P"]]
                names = []
                for who in (pair["P"], pair["Q"]):
                    fuse = plan_of[who]
                    # names are the bundle's, across models: the model's name first
                    vname = f"{name}.f{SHORT.get(fuse, fuse)}_l{SHORT.get(lim, lim)}"
                    if fuse == BUNDLE_PROFILE and lim == BUNDLE_PROFILE:
                        vname = "hw"  # the bundle's own build is this one
                    else:
                        specs.setdefault(vname, {"name": vname, "model": model, "fusion_profile": fuse,
                                                 "limits": lim})
                    names.append(vname)
                pairs_here.append({"model": model, "batch": batch, **pair, "P_plan": plan_of[pair["P"]],
                                   "Q_plan": plan_of[pair["Q"]], "limits": lim,
                                   "P_variant": names[0], "Q_variant": names[1]})
        chosen = best_builds([{p["P_variant"], p["Q_variant"]} - {"hw"} for p in pairs_here], list(specs),
                             max_variants)
        for pair in pairs_here:
            if not {pair["P_variant"], pair["Q_variant"]} - {"hw"} <= chosen:
                pair["skipped"] = f"over --max-variants {max_variants} for {model}"
        out["pairs"] += pairs_here
        out["variants"] += [spec for vname, spec in specs.items() if vname in chosen]
    return out


def best_builds(needs: Sequence[set], candidates: Sequence[str], most: int) -> set:
    """The at most ``most`` of ``candidates`` that answer the most pairs (a pair, its set of
    ``needs``, is answered when all of them are built); among equals, the set whose answered
    pairs come first in ``needs`` order (the H200's pairs first), then the smaller set."""
    def key(built: set) -> tuple:
        answered = [i for i, need in enumerate(needs) if need <= built]
        return (len(answered), [-i for i in answered], -len(built))

    if math.comb(len(candidates), min(most, len(candidates))) > _MAX_COMBINATIONS:
        # too many sets to try each: add, one at a time, the build that answers the most pairs (the
        # earliest needed among equals)
        built: set = set()
        while len(built) < most and set(candidates) - built:
            built.add(max(set(candidates) - built, key=lambda c: (key(built | {c}), -candidates.index(c))))
        return set().union(*(need for need in needs if need <= built))  # no build that answers nothing
    return max((set(combo) for size in range(min(most, len(candidates)) + 1)
                for combo in itertools.combinations(candidates, size)), key=key)


def variant_args(variants: Sequence[dict]) -> List[str]:
    return [f"{v['name']}:{v['model']}:fusion_profile={v['fusion_profile']},limits={v['limits']}"
            for v in variants]


def commands(result: dict, bundle: str, models: Sequence[str], batches: Sequence[int]) -> Dict[str, str]:
    """The bundle command here and the two device commands (timing, then ncu)."""
    variants = " ".join(f"--variant {a}" for a in variant_args(result["variants"]))
    names = "|".join(sorted({re.escape(v["name"]) for v in result["variants"]}))
    sel = f"--models {' '.join(models)} --batches {' '.join(map(str, batches))}"
    return {
        "build": (f"nice -n 5 .venv/bin/tvm-fusion-hw bundle --out {bundle} {sel} --profile {BUNDLE_PROFILE} "
                  f"--no-graph {variants}"),
        "time": (f"python3 {bundle}/run.py --out emu-results {sel} --no-graph --torch "
                 f"--repeat 20"),
        "ncu": (f"ncu --metrics {','.join(NCU_METRICS)} --cache-control all --csv --page raw --print-units base "
                f"--log-file emu-results/dram.csv python3 {bundle}/run.py --out emu-ncu {sel} --no-graph "
                f"--torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0"),
        "report": (f".venv/bin/python bench/emulated_limits.py report --bundle {bundle} --results "
                   f"emu-results/results.json --ncu emu-results/dram.csv --out emu-results/emulated_limits.md"),
        "variants": names,
    }


# ---- report --------------------------------------------------------------------------------
def _scale(unit: str) -> float:
    unit = (unit or "byte").strip().lower()
    return {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
            "kibyte": 1024, "mibyte": 2**20, "gibyte": 2**30}.get(unit, 1)


def _num(text: str) -> float:
    return float(str(text).replace(",", "")) if str(text).strip() not in ("", "n/a") else 0.0


def read_ncu(text: str) -> List[Tuple[str, float]]:
    """``[(kernel name, DRAM bytes read + written)]`` per launch, in launch order, from ncu's CSV
    (``--page raw``: a column per metric and a row of units; or the default details page: a row
    per metric)."""
    ncu_table = _ncu_table_module()
    rows = ncu_table.csv_rows(text)
    if not rows:
        return []
    head = rows[0]
    if "Metric Name" in head:  # details page
        col = {h: i for i, h in enumerate(head)}
        launches: Dict[str, List] = {}
        for row in rows[1:]:
            if row[col["Metric Name"]] in NCU_METRICS:
                key = (row[col.get("Process ID", col["ID"])], int(row[col["ID"]]))
                item = launches.setdefault(key, [row[col["Kernel Name"]], 0.0])
                item[1] += _num(row[col["Metric Value"]]) * _scale(row[col["Metric Unit"]])
        return [tuple(v) for _, v in sorted(launches.items())]
    launches, units = ncu_table.read_raw_page(text)
    return [(launch["Kernel Name"], sum(_num(launch[m]) * _scale(units.get(m) or "byte")
                                        for m in NCU_METRICS if m in launch))
            for launch in launches]


def segment(stream: List[Tuple[str, float]], order: List[Tuple[str, List[str]]],
            runs: int = 3) -> Dict[str, dict]:
    """Each library's ``main`` runs in an ncu stream: libraries in the order the runner ran them
    (``order``: ``[(key, kernel launches of one main run)]``); each library's first run after the
    previous library's last, then up to ``runs`` runs back to back. Returns per key the timed (last)
    run's bytes, per kernel and in all, and how many runs were found."""
    names = [n for n, _ in stream]
    pos, found = 0, {}
    for key, seq in order:
        n = len(seq)
        if not n:
            continue
        start = next((i for i in range(pos, len(names) - n + 1) if names[i:i + n] == seq), None)
        if start is None:
            found[key] = {"error": "not found in the ncu CSV"}
            continue
        copies = [start]
        while len(copies) < runs and names[copies[-1] + n: copies[-1] + 2 * n] == seq:
            copies.append(copies[-1] + n)
        last = copies[-1]
        per_kernel: Dict[str, float] = {}
        for name, value in stream[last:last + n]:
            per_kernel[name] = per_kernel.get(name, 0.0) + value
        found[key] = {"bytes": sum(per_kernel.values()), "per_kernel": per_kernel, "runs": len(copies),
                      "all_runs": [sum(v for _, v in stream[c:c + n]) for c in copies]}
        pos = last + n
    return found


def library_dram(entries: Dict[Tuple, dict], results: dict, ncu_text: Optional[str],
                 runs: int = 3) -> Dict[Tuple, dict]:
    """:func:`segment` of an ncu CSV over a bundle's libraries (``entries``: the manifest's, by
    ``(model, batch)``) in the order the runner ran them (``results``' rows), keyed by
    ``((model, batch), variant)``; empty without a CSV."""
    if not ncu_text:
        return {}
    order = []
    run_rows = [(r["model"], r["batch"]) for r in results.get("rows", [])] or list(entries)
    for key in run_rows:
        for v in entries.get(key, {}).get("variants", []):
            if not v.get("cuda_graph"):
                order.append(((key, v["name"]), v.get("launches", [])))
    return segment(read_ncu(ncu_text), order, runs)


def modelled_s(per_kernel: Dict[str, float], report: Optional[dict], profile) -> float:
    """Sum over kernels of max(bytes / P's bandwidth, FLOPs / P's FP32 peak) (FLOPs of the group
    whose PrimFunc launches the kernel, from the fusion report; 0 where none): each kernel's
    roofline bound with measured bytes in place of the report's compulsory ones."""
    from tvm_fusion_hw.explain.collect import roofline_seconds  # pylint: disable=import-outside-toplevel
    flops = {}
    for group in (report or {}).get("groups", []):
        flops[group["kernel"]] = float(group.get("flops") or 0)
    total = 0.0
    for kernel, nbytes in per_kernel.items():
        func = re.sub(r"_kernel(_\d+)?$", "", kernel)
        share = flops.pop(func, 0.0)  # a PrimFunc's FLOPs counted once, on its first kernel
        total += roofline_seconds(share, nbytes, profile)
    return total


def _ms(sec: Optional[float]) -> str:
    return f"{sec * 1e3:.3f}" if isinstance(sec, (int, float)) else "-"


def report(bundle: Path, results: dict, emu_plan: dict, ncu_text: Optional[str] = None,
           runs: int = 3, tie: float = 0.02) -> str:
    """The markdown table (see the module's docstring)."""
    from tvm_fusion_hw.hardware.profile import load_profile  # pylint: disable=import-outside-toplevel
    manifest = json.loads((bundle / "manifest.json").read_text())
    entries = {(e["model"], e["batch"]): e for e in manifest["entries"]}
    rows = {(r["model"], r["batch"]): r for r in results.get("rows", [])}
    dram = library_dram(entries, results, ncu_text, runs)
    gpu = results.get("system", {}).get("gpu", results.get("system", {}).get("device", "?"))
    lines = [f"# P's plan against Q's plan, both under P's limits, on the {gpu}", "",
             f"Bundle {bundle} (commit {manifest.get('commit')}), results on {gpu}. "
             "Times: median of the runner's repeats (ms). Feasible: every kernel's ptxas registers, shared "
             "memory and block size fit P, and no fused pair had to be staged under P's limits. "
             "DRAM: ncu dram__bytes_read.sum + dram__bytes_write.sum of one main run (MB), each kernel "
             "with cold caches (ncu --cache-control all: the L2 keeps nothing between kernels). "
             "**Modelled** (not measured): sum over kernels of max(bytes / P's DRAM bandwidth, FLOPs / P's "
             "FP32 peak), in ms: bandwidth cannot be emulated.", "",
             "| model | batch | P | Q | decision | P-plan ms | Q-plan ms (P's limits) | winner | feasible P / Q "
             "| DRAM MB P / Q | modelled ms on P's roofline, P / Q |",
             "| --- | ---: | --- | --- | --- | ---: | ---: | --- | --- | ---: | ---: |"]
    for pair in emu_plan["pairs"]:
        key = (pair["model"], pair["batch"])
        entry, row = entries.get(key, {}), rows.get(key, {})
        variants = {v["name"]: v for v in entry.get("variants", [])}
        prof = load_profile(pair["P"])
        cells = []
        for which in ("P_variant", "Q_variant"):
            name = pair[which]
            var = variants.get(name, {})
            emu = var.get("emulation", {})
            feasible = emu.get("feasible", True if name == "hw" else None)
            if name in entry.get("build_errors", {}):
                feasible = False
            time_s = row.get("times_s", {}).get(name)
            if name in row.get("errors", {}):
                time_s = None
            got = dram.get((key, name), {})
            report_json = None
            if var.get("report") and (bundle / var["report"]).is_file():
                report_json = json.loads((bundle / var["report"]).read_text())
            elif name == "hw" and entry.get("report") and (bundle / entry["report"]).is_file():
                report_json = json.loads((bundle / entry["report"]).read_text())
            model_s = modelled_s(got["per_kernel"], report_json, prof) if "per_kernel" in got else None
            cells.append({"time": time_s, "feasible": feasible, "bytes": got.get("bytes"), "model": model_s,
                          "problems": emu.get("problems", [])})
        p, q = cells
        if pair.get("skipped"):
            winner = f"not built ({pair['skipped']})"
        elif p["feasible"] is False:
            winner = "P's plan infeasible under P's limits"
        elif q["feasible"] is False:
            winner = "P (Q's plan infeasible under P's limits)"
        elif p["time"] is None or q["time"] is None:
            winner = "not timed"
        elif p["time"] <= q["time"] * (1 + tie):
            winner = "P" if p["time"] < q["time"] * (1 - tie) else f"tie (within {tie:.0%})"
        else:
            winner = f"**Q** (+{p['time'] / q['time'] - 1:.0%})"
        feas = " / ".join({True: "yes", False: "NO", None: "?"}[c["feasible"]] for c in (p, q))
        mb = " / ".join(f"{c['bytes'] / 1e6:.2f}" if c["bytes"] is not None else "-" for c in (p, q))
        mod = " / ".join(_ms(c["model"]) for c in (p, q)) + (" (modelled)" if p["model"] or q["model"] else "")
        decision = (f"{', '.join(pair['kinds'])}: P fuses {pair['P_fuses']}, Q fuses {pair['Q_fuses']}")
        lines.append(f"| {pair['model']} | {pair['batch']} | {pair['P']} | {pair['Q']} | {decision} | "
                     f"{_ms(p['time'])} | {_ms(q['time'])} | {winner} | {feas} | {mb} | {mod} |")
    notes = []
    for (model, batch), entry in entries.items():
        for v in entry.get("variants", []):
            for prob in v.get("emulation", {}).get("problems", []):
                notes.append(f"- {model} b{batch} {v['name']}: {prob}")
    if notes:
        lines += ["", "Infeasible kernels:", *sorted(set(notes))]
    missing = [f"{k[0][0]} b{k[0][1]} {k[1]}: {v['error']}" for k, v in dram.items() if "error" in v]
    short = [f"{k[0][0]} b{k[0][1]} {k[1]}: {v['runs']} of {runs} runs" for k, v in dram.items()
             if "runs" in v and v["runs"] != runs]
    if missing or short:
        lines += ["", "ncu CSV:", *[f"- {m}" for m in missing + short]]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan", help="the builds and commands; --out DIR builds the bundle here")
    pl.add_argument("--differences", default=str(DIFFERENCES))
    pl.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    pl.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES))
    pl.add_argument("--profiles", nargs="+", default=list(SHORT), help="NVIDIA profiles to pair")
    pl.add_argument("--max-variants", type=int, default=4, help="extra builds per model at most")
    pl.add_argument("--bundle", default=".bundle_emu", help="bundle folder the commands name")
    pl.add_argument("--out", help="build the bundle into this folder now")
    rp = sub.add_parser("report", help="the markdown table from the runner's results.json (+ ncu CSV)")
    rp.add_argument("--bundle", required=True)
    rp.add_argument("--results", required=True)
    rp.add_argument("--ncu", help="ncu --csv output with dram__bytes_read.sum,dram__bytes_write.sum")
    rp.add_argument("--main-runs", type=int, default=3, help="main runs per library in the ncu run")
    rp.add_argument("--tie", type=float, default=0.02, help="relative difference counted as a tie")
    rp.add_argument("--out", help="markdown file (default: stdout)")
    args = ap.parse_args(argv)
    if args.cmd == "plan":
        result = plan(json.loads(Path(args.differences).read_text()), args.models, args.batches,
                      args.profiles, args.max_variants)
        bundle = args.out or args.bundle
        cmds = commands(result, bundle, args.models, args.batches)
        result["commands"] = cmds
        for pair in result["pairs"]:
            print(f"{pair['model']} b{pair['batch']}: P={pair['P']} Q={pair['Q']} ({', '.join(pair['kinds'])}): "
                  f"{pair['P_variant']} vs {pair['Q_variant']}" + (f" SKIPPED {pair['skipped']}" if pair.get("skipped") else ""))
        print(f"\n{len(result['variants'])} extra builds\n")
        for key in ("build", "time", "ncu", "report"):
            print(f"# {key}\n{cmds[key]}\n")
        Path(bundle).mkdir(parents=True, exist_ok=True)  # the bundle keeps the plan (report reads it)
        Path(bundle, "emulation_plan.json").write_text(json.dumps(result, indent=1))
        if args.out:
            from tvm_fusion_hw.bundle.writer import write_bundle  # pylint: disable=import-outside-toplevel
            write_bundle(args.out, args.models, args.batches, profile=BUNDLE_PROFILE, cuda_graph=False,
                         variants=variant_args(result["variants"]))
        return 0
    bundle = Path(args.bundle)
    emu_plan = json.loads((bundle / "emulation_plan.json").read_text())
    text = report(bundle, json.loads(Path(args.results).read_text()), emu_plan,
                  Path(args.ncu).read_text() if args.ncu else None, args.main_runs, args.tie)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
