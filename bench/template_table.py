#!/usr/bin/env python3
"""Each schedule template's kernel time against dlight's schedule of the same kernel (issue 3).

Input: a runner ``results.json`` made with ``--kernel-profile`` from a bundle that has, beside
``hw``, a variant of the same model built with ``schedules=false`` alone
(``--variant mobilenet_v2_dlight:mobilenet_v2:schedules=false``). That variant has hw's groups
(the fusion pass never reads ``schedules``; the policy asks the templates for pair plans in both
builds) and so hw's kernel names; only the schedules differ. Each hw kernel is labelled with the
rule that schedules it (:func:`tvm_fusion_hw.schedule_report.explain_schedules` on the model,
batch and profile the bundle compiled, imported as the bundle imports it), so run this from the
commit the bundle was built from: the labels are this checkout's rules.

    python bench/template_table.py results/results.json --out bench/results/<dir>/templates.md

Writes, per model x batch, a table of kernels (calls, rule, us per call under the template and
under dlight, speed-up = dlight / template) and a per-rule summary (us over all calls of its
kernels, their ratio, the geometric mean of per-kernel speed-ups). Kernels no template takes are
dlight's in both builds; their rows show how much two identical schedules differ between runs.
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from tvm_fusion_hw.errors import FusionHWError

DLIGHT_KNOBS = {"schedules": False}  # the variant's knobs, exactly: anything else changes groups
BOTH = "dlight in both"  # label prefix of kernels no template takes


# ---------------------------------------------------------------------------- reading results.json
def load_results(path: Path) -> dict:
    """The runner's results.json, or a one-line error."""
    try:
        results = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FusionHWError(f"{path}: no such file (the runner's results.json)") from None
    except (OSError, ValueError) as err:
        raise FusionHWError(f"{path}: not a readable results.json ({err})") from None
    if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
        raise FusionHWError(f"{path}: no 'rows': not a bench/runner.py results.json")
    return results


def dlight_variant(row: dict) -> Optional[str]:
    """The row's variant built with ``schedules=false`` alone (``<model>_dlight`` if several)."""
    knobs = row.get("knobs") or {}
    found = sorted(name for name, k in knobs.items() if k == DLIGHT_KNOBS)
    preferred = f"{row['model']}_dlight"
    if preferred in knobs and preferred not in found:
        raise FusionHWError(f"{row['model']} b{row['batch']}: variant {preferred} has knobs "
                            f"{knobs[preferred]}, not schedules=false alone (its groups would differ from hw's)")
    if len(found) > 1 and preferred not in found:
        raise FusionHWError(f"{row['model']} b{row['batch']}: several schedules=false variants "
                            f"({', '.join(found)}); name one {preferred}")
    return preferred if preferred in found else (found[0] if found else None)


def select_rows(results: dict, models: Optional[Sequence[str]] = None,
                batches: Optional[Sequence[int]] = None) -> List[Tuple[dict, str]]:
    """(row, dlight variant name) of every model x batch to tabulate.

    Without ``models``: each model some row has a schedules=false variant for. Every selected
    row must then have both kernel profiles, complete: a crashed or unprofiled row is an error,
    not a gap.
    """
    rows = results["rows"]
    if models is None:
        models = sorted({r["model"] for r in rows if "error" not in r and dlight_variant(r)},
                        key=[r["model"] for r in rows].index)
        if not models:
            raise FusionHWError("no row of results.json has a variant built with schedules=false alone: "
                                "bundle with --variant MODEL_dlight:MODEL:schedules=false")
    out = []
    for model in models:
        picked = [r for r in rows if r["model"] == model and (not batches or r["batch"] in batches)]
        if not picked:
            raise FusionHWError(f"results.json has no row for {model}"
                                + (f" at batch {' or '.join(map(str, batches))}" if batches else ""))
        for row in picked:
            where = f"{row['model']} b{row['batch']}"
            if "error" in row:
                raise FusionHWError(f"{where}: the runner failed ({str(row['error'])[:200]})")
            name = dlight_variant(row)
            if name is None:
                raise FusionHWError(f"{where}: no variant built with schedules=false alone "
                                    f"(bundle --variant {model}_dlight:{model}:schedules=false)")
            errors = row.get("errors") or {}
            for lib in ("hw", name):
                if lib not in (row.get("kernels") or {}):
                    why = errors.get(f"{lib} kernels") or errors.get(lib)
                    raise FusionHWError(f"{where}: no kernel profile of {lib} " + (
                        f"({str(why)[:200]})" if why else "(run the bundle with --kernel-profile)"))
                kernel_times(row, lib)  # complete, or an error before any labelling
            out.append((row, name))
    return out


def kernel_times(row: dict, lib: str) -> Dict[str, dict]:
    """{kernel: {"us", "calls", "us_per_call"}} of one library, every kernel of it."""
    prof = row["kernels"][lib]
    listed = prof.get("all", prof["top"])
    if len(listed) < prof["distinct"]:  # a runner from before "all": the top rows only
        raise FusionHWError(f"{row['model']} b{row['batch']}: {lib}'s profile lists {len(listed)} of "
                            f"{prof['distinct']} kernels (a results.json from a runner that kept the top "
                            f"rows only); rerun with this version's bundle runner")
    return {k["name"]: k for k in listed}


# ---------------------------------------------------------------------------- labels
def commit_note(built: Optional[str], here: Optional[str]) -> Optional[str]:
    """Why the labels may not be the bundle's rules: another commit (or an unrecorded one)."""
    if not built:
        return (f"the bundle's commit is not recorded (built before manifest 'commit'): the labels are "
                f"the rules of {here or 'this checkout'}; check that this is the commit the bundle was built from")
    if built != here:
        return (f"the bundle was built at {built}, the labels are the rules of {here or 'this checkout'}: "
                "a template added or changed in between mislabels kernels")
    return None


def explain(model: str, batch: int, profile: str) -> Dict[str, str]:
    """{kernel: rule} of hw's build of ``model`` at ``batch`` for ``profile`` (as the bundle builds it)."""
    import tvm  # pylint: disable=import-outside-toplevel

    import tvm_fusion_hw as hw  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.bundle.model_import import import_model  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.schedule_report import explain_schedules  # pylint: disable=import-outside-toplevel

    mod = import_model(model, batch)[1]  # lifted: main's kernels have the bundle's names
    target = hw.target(profile)
    with hw.pass_context(target):  # the bundle's build options
        return {c.kernel: c.rule for c in explain_schedules(mod, target)}


def label(rule: Optional[str]) -> str:
    """A rule as the tables show it: a template's name, or which dlight rule has it in both."""
    if rule is None:
        return "? (not in this checkout's build)"
    return f"{BOTH} ({rule[len('dlight '):]})" if rule.startswith("dlight ") else rule


# ---------------------------------------------------------------------------- tables
def compare(row: dict, variant: str, rules: Dict[str, str]) -> Tuple[List[dict], List[str]]:
    """Per hw kernel: calls, label, us per call under hw and under the variant, speed-up; and the
    kernels only one of the two profiles has (empty when the groups are the same)."""
    ours, theirs = kernel_times(row, "hw"), kernel_times(row, variant)
    lines = []
    for name, k in ours.items():
        other = theirs.get(name)
        lines.append({"kernel": name, "calls": k["calls"], "label": label(rules.get(name)),
                      "us": k["us"], "us_per_call": k["us_per_call"],
                      "dlight_us": other["us"] if other else None,
                      "dlight_us_per_call": other["us_per_call"] if other else None,
                      "speedup": other["us_per_call"] / k["us_per_call"]
                      if other and k["us_per_call"] > 0 else None})
    lines.sort(key=lambda x: -x["us"])
    unmatched = sorted(set(ours) ^ set(theirs))
    return lines, unmatched


def summarise(lines: List[dict]) -> List[dict]:
    """Per label: kernels, us over all calls under each schedule, and the per-kernel geomean."""
    out: Dict[str, dict] = {}
    for line in lines:
        if line["speedup"] is None:
            continue
        acc = out.setdefault(line["label"], {"label": line["label"], "kernels": 0, "calls": 0,
                                             "us": 0.0, "dlight_us": 0.0, "logs": []})
        acc["kernels"] += 1
        acc["calls"] += line["calls"]
        acc["us"] += line["us"]
        acc["dlight_us"] += line["dlight_us"]
        acc["logs"].append(math.log(line["speedup"]))
    for acc in out.values():
        acc["geomean"] = math.exp(sum(acc.pop("logs")) / acc["kernels"])
    return sorted(out.values(), key=lambda a: (a["label"].startswith(BOTH), -a["us"]))


def _speed(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _us(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def section(row: dict, variant: str, rules: Dict[str, str]) -> List[str]:
    """Markdown for one model x batch: the per-template summary, then every kernel."""
    lines, unmatched = compare(row, variant, rules)
    summary = summarise(lines)
    times = row.get("times_s") or {}
    e2e = ", ".join(f"{lib} {times[lib] * 1e3:.3f} ms" for lib in ("hw", variant) if lib in times)
    out = [f"## {row['model']} b{row['batch']}", "",
           f"hw (templates) against `{variant}` (schedules=false, dlight): end to end {e2e or 'not timed'}.", ""]
    if unmatched:  # the groups differ: those kernels have no counterpart
        out += [f"**{len(unmatched)} kernels are in one profile only** (the groups differ): "
                + ", ".join(f"`{n}`" for n in unmatched), ""]
    out += ["| template | kernels | calls | template us | dlight us | speed-up (sum) | geomean speed-up |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    out += [f"| {a['label']} | {a['kernels']} | {a['calls']} | {a['us']:.2f} | {a['dlight_us']:.2f} | "
            f"{_speed(a['dlight_us'] / a['us'] if a['us'] > 0 else None)} | {_speed(a['geomean'])} |"
            for a in summary]
    total, dl_total = sum(a["us"] for a in summary), sum(a["dlight_us"] for a in summary)
    logs = [math.log(x["speedup"]) for x in lines if x["speedup"]]
    if logs:
        out.append(f"| all kernels | {len(logs)} | {sum(a['calls'] for a in summary)} | {total:.2f} | "
                   f"{dl_total:.2f} | {_speed(dl_total / total if total > 0 else None)} | "
                   f"{_speed(math.exp(sum(logs) / len(logs)))} |")
    out += ["", "| kernel | calls | template (rule) | template us/call | dlight us/call | speed-up |",
            "| --- | ---: | --- | ---: | ---: | ---: |"]
    out += [f"| `{x['kernel']}` | {x['calls']} | {x['label']} | {_us(x['us_per_call'])} | "
            f"{_us(x['dlight_us_per_call'])} | {_speed(x['speedup'])} |" for x in lines]
    return out + [""]


def write_table(results: dict, out: Path, source: str, models=None, batches=None,
                profile: Optional[str] = None,
                explainer: Callable[[str, int, str], Dict[str, str]] = explain) -> str:
    """Write templates.md for the selected rows; return its text."""
    picked = select_rows(results, models, batches)
    profile = profile or results.get("profile")
    if not profile:
        raise FusionHWError("results.json names no profile: give --profile")
    from tvm_fusion_hw.bundle.writer import source_commit  # pylint: disable=import-outside-toplevel

    here = source_commit()
    note = commit_note(results.get("bundle_commit"), here)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    sysinfo = results.get("system") or {}
    text = [f"# Templates against dlight's schedules, kernel by kernel "
            f"({sysinfo.get('gpu') or sysinfo.get('device', '?')}, {sysinfo.get('date', '?')})", "",
            f"From `{source}` (profile {profile}), by `python bench/template_table.py {source} --out {out}`. "
            "Each kernel timed alone (runner --kernel-profile): hw with the plugin's templates, and a "
            "variant with the same groups scheduled by dlight (schedules=false). us = us per call x calls; "
            "speed-up = dlight / template (above 1: the template is faster). Rules are this checkout's "
            f"(explain_schedules); kernels no template takes are '{BOTH}'.", ""]
    text += [f"**Note:** {note}.", ""] if note else [f"Bundle and labels from commit {here}.", ""]
    for row, variant in picked:
        text += section(row, variant, explainer(row["model"], int(row["batch"]), profile))
    body = "\n".join(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body)
    return body


def main(argv=None) -> int:
    """Command line: templates.md from a results.json; bad input is one line on stderr, status 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the runner's results.json (--kernel-profile)")
    parser.add_argument("--out", type=Path, required=True, help="markdown to write (templates.md)")
    parser.add_argument("--models", nargs="+", help="only these (default: every model with a dlight variant)")
    parser.add_argument("--batches", nargs="+", type=int, help="only these batch sizes")
    parser.add_argument("--profile", help="hardware profile (default: the one results.json names)")
    args = parser.parse_args(argv)
    try:
        write_table(load_results(args.results), args.out, str(args.results), args.models, args.batches,
                    args.profile)
    except FusionHWError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
