"""Where the hardware decided: the fusion decisions that differ between profiles, per corpus model.

For every corpus model (``tvm_fusion_hw.models.corpus.names()``) at each batch, the model is fused
(no schedule, no build: ``pipeline.fused_module`` with ``pipeline.fusion_pass`` of each profile's
target) for every shipped profile; the decisions are lined up across profiles the way
``tvm-fusion-hw explain`` lines them up (``explain.compare.align_decisions``) and each decision
that differs is listed with its verdict per profile, the test that came out otherwise and the
figures that decided (ridge, break-even ridge, modelled times, occupancy, shared memory). Writes
``profile_differences.json`` and ``profile_differences.md`` to ``--out``::

    nice python bench/profile_differences.py --out bench/results/2026-12-01-profile-differences
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

#: the figures of a decision worth a column: what the per-profile rules test
DECIDING = ("ridge_flop_per_byte", "break_even_ridge_flop_per_byte", "cost_fused_us", "cost_apart_us",
            "recompute", "occupancy_drop", "fused_occupancy", "unfused_occupancy", "fused_shared_bytes",
            "shared_bytes_per_block_limit", "plan_registers_per_thread", "estimated_registers",
            "register_budget", "ops", "depth_cap", "plan_blocks", "blocks_per_wave",
            "saved_flop_per_added_byte", "direct_us", "winograd_us", "gemm_us", "data_transform_us",
            "output_transform_us")


def plan_view(profile, fuse):
    """The fusion report of one profile as explain's PlanView (no kernels: nothing was built)."""
    from tvm_fusion_hw.explain.model import PlanView  # pylint: disable=import-outside-toplevel

    report = fuse.report
    return PlanView(
        label=profile.name, profile=profile.name, display_name=profile.display_name,
        peak_flop_per_s=profile.peak_fp32_flop_per_s, dram_bytes_per_s=profile.dram_bytes_per_s,
        ridge_flop_per_byte=profile.ridge_point_flop_per_byte, knobs={}, budgets=report.all_budgets(),
        kernels=[], decisions=list(report.decisions), stock=[],
        policy={k: v for k, v in fuse.config.__dict__.items() if isinstance(v, (int, float, str, bool))})


def model_differences(name: str, batch: int, profiles) -> dict:
    """The differing decisions of one model at one batch across ``profiles``."""
    from tvm_fusion_hw import models, pipeline  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.explain.compare import align_decisions  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.frontend import import_onnx  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.hardware.target import target as make_target  # pylint: disable=import-outside-toplevel

    mod = import_onnx(models.build(f"corpus:{name}", batch=batch), name=name)
    plans, kernels = [], {}
    for profile in profiles:
        tgt = make_target(profile.name)
        fuse = pipeline.fusion_pass(tgt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fused = pipeline.fused_module(mod, tgt, fuse)
        kernels[profile.name] = len(pipeline.kernel_names(fused))
        plans.append(plan_view(profile, fuse))
    rows, consequences = [], 0
    for row in align_decisions(plans):
        if not row.differs:
            continue
        made = [d for d in row.decisions if d is not None]
        if len({(d.fused, d.staged) for d in made}) < 2:
            # the same verdict wherever it was asked; absent elsewhere because an earlier decision
            # (a Winograd rewrite, a pair) shaped the graph otherwise: a consequence, not a difference
            consequences += 1
            continue
        per_profile = {}
        for plan, decision in zip(plans, row.decisions):
            if decision is None:
                per_profile[plan.label] = {"verdict": "-"}
                continue
            figures = {k: decision.figures[k] for k in DECIDING if decision.figures.get(k) is not None}
            per_profile[plan.label] = {"verdict": _verdict(decision), "reason": decision.reason,
                                       "figures": figures}
        rows.append({"rule": row.rule, "producer": row.producer, "consumer": row.consumer,
                     "why": row.why, "profiles": per_profile})
    return {"model": name, "batch": batch, "kernels": kernels, "differences": rows,
            "absent_elsewhere": consequences}


def _verdict(decision) -> str:
    return "FUSE" if decision.fused else ("stage" if decision.staged else "apart")


def decided_by(entry: dict) -> str:
    """One profile's verdict on a decision and the figure that made it, in a few words."""
    verdict, fig, reason = entry["verdict"], entry.get("figures", {}), entry.get("reason", "")
    if verdict == "-":
        return "-"
    if "matmul -> softmax -> matmul" in reason:  # attention: its grid against one wave, or no template
        waves = re.search(r"its (\d+) blocks (?:run in one wave|take (\d+) waves) of (\d+)", reason)
        if waves:
            return f"{verdict}: {waves[1]} blocks in {waves[2] or 1} wave(s) of {waves[3]}"
        if "does not take it" in reason:
            return f"{verdict}: no Attention template on this target"
    if "winograd_us" in fig:  # Winograd: both ways costed on the profile
        return (f"{'Winograd' if verdict == 'FUSE' else 'direct'}: {fig['winograd_us']:.1f} us by Winograd "
                f"(GEMM {fig['gemm_us']:.1f}) vs {fig['direct_us']:.1f} direct "
                f"({fig['saved_flop_per_added_byte']:.0f} FLOP/B, ridge {fig['ridge_flop_per_byte']:.0f})")
    if "break_even_ridge_flop_per_byte" in fig:
        ridge, even = fig["ridge_flop_per_byte"], fig["break_even_ridge_flop_per_byte"]
        return (f"{verdict}: ridge {ridge:.1f} {'>=' if ridge >= even else '<'} {even:.1f} "
                f"({fig['cost_fused_us']:.0f} vs {fig['cost_apart_us']:.0f} us)")
    if entry["verdict"] == "stage" and "occupancy_drop" in fig and "drops" in reason:
        return f"{verdict}: occupancy -{fig['occupancy_drop']:.0%}"
    if "exceed the depth cap" in reason:
        return f"{verdict}: {fig.get('ops')} ops > cap {fig.get('depth_cap')}"
    if verdict == "FUSE" and "occupancy_drop" in fig:
        return f"{verdict}: fits, occupancy -{max(fig['occupancy_drop'], 0):.0%}"
    if verdict == "FUSE" and "depth_cap" in fig and "ops" in fig:
        return f"{verdict}: {fig['ops']} ops <= cap {fig['depth_cap']}"
    return f"{verdict}: {_short(reason.split(': ', 1)[-1], 50)}"


def _short(text: str, limit: int = 220) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: what decided a row, from the pair its reasons name (or the rule)
KINDS = ("depthwise -> pointwise", "conv -> pool", "attention", "depth cap", "winograd", "other")


def kind_of(row: dict) -> str:
    if row["rule"] == "winograd":
        return "winograd"
    reasons = " ".join(p.get("reason", "") for p in row["profiles"].values())
    if "depthwise_conv -> pointwise_conv" in reasons:
        return KINDS[0]
    if "-> window" in reasons:
        return KINDS[1]
    if "matmul -> softmax -> matmul" in reasons:
        return KINDS[2]
    return KINDS[3] if "depth" in row["rule"] else KINDS[5]


def fusion_differs(row: dict) -> bool:
    """Whether some profile fuses the decision's two groups and another does not (a different
    kernel), not only a different reason to keep them apart (``stage`` against ``apart``)."""
    verdicts = {p["verdict"] for p in row["profiles"].values()} - {"-"}
    return "FUSE" in verdicts and len(verdicts) > 1


def markdown(result: dict) -> str:
    """The table: counts first, then per model the decisions that differ."""
    names = sorted(result["profiles"], key=lambda n: (n != "nvidia-h200", n))  # the reference first
    entries = result["entries"]
    fusing = {(e["model"], e["batch"]) for e in entries if any(map(fusion_differs, e["differences"]))}
    lines = ["# Fusion decisions that differ between profiles", "",
             (f"Corpus: {len(result['models'])} models x batch {', '.join(map(str, result['batches']))} x "
              f"{len(names)} profiles, fusion only (no build). Reproduce: see README.md here."), ""]
    for batch in result["batches"]:
        at = [e for e in entries if e["batch"] == batch]
        differ = [e for e in at if e["differences"]]
        grouped = [e for e in at if (e["model"], batch) in fusing]
        lines.append(f"- batch {batch}: {len(differ)} of {len(at)} models have at least one decision "
                     f"that differs between profiles; in {len(grouped)} a pair is fused on one profile "
                     f"and not on another (different kernels); "
                     f"{sum(e.get('absent_elsewhere', 0) for e in at)} decisions with one verdict were "
                     "asked on some profiles only (the graph shaped by an earlier decision), not counted")
    any_batch = {e["model"] for e in entries if e["differences"]}
    any_fusing = {m for m, _ in fusing}
    lines += [(f"- either batch: {len(any_batch)} of {len(result['models'])} models differ in a decision, "
               f"{len(any_fusing)} in their kernels: {', '.join(sorted(any_fusing))}"), ""]
    errors = [e for e in entries if e.get("error")]
    lines += [f"- not fused (error): {e['model']} b{e['batch']}: {e['error']}" for e in errors]
    lines += [""] if errors else []
    lines += [("Models with a difference, per profile (the profile's verdict differs from the most "
               "common one on at least one decision; kernels per profile in the JSON):"), "",
              "| profile | ridge FLOP/B | models (b1) | models (b32) | pairs fused (b1) | pairs fused (b32) |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in names:
        counts, fused = [], []
        for batch in result["batches"][:2]:
            at = [e for e in entries if e["batch"] == batch]
            counts.append(sum(1 for e in at if any(_odd_one(r, name) for r in e["differences"])))
            fused.append(sum(1 for e in at for r in e["differences"]
                             if fusion_differs(r) and r["profiles"][name]["verdict"] == "FUSE"))
        lines.append(f"| {name} | {result['ridge'][name]:.1f} | " + " | ".join(map(str, counts + fused)) + " |")
    lines += ["", ("Where the kernels differ, by the rule that decided: per profile, the pairs (or chains) "
                   "it fuses that another profile does not fuse, batch 1 / batch 32:"), "",
              "| profile | " + " | ".join(KINDS) + " |", "| --- |" + " ---: |" * len(KINDS)]
    for name in names:
        cells = []
        for kind in KINDS:
            counts = [sum(1 for e in entries if e["batch"] == batch for r in e["differences"]
                          if fusion_differs(r) and kind_of(r) == kind and r["profiles"][name]["verdict"] == "FUSE")
                      for batch in result["batches"][:2]]
            cells.append(" / ".join(map(str, counts)))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for entry in entries:
        if not entry["differences"]:
            continue
        lines += [f"## {entry['model']}, batch {entry['batch']}", "",
                  "kernels: " + ", ".join(f"{n} {entry['kernels'].get(n, '?')}" for n in names), "",
                  ("Each cell: the verdict and the figure that decided it (ridge against the break-even "
                   "ridge with both plans' modelled times, occupancy drop, depth cap); the JSON has "
                   "every reason and figure and explain's comparison (`why`)."), "",
                  "| decision | " + " | ".join(names) + " |",
                  "| --- | " + " | ".join("---" for _ in names) + " |"]
        for row in entry["differences"]:
            cells = [decided_by(row["profiles"][n]) for n in names]
            mark = " **kernels differ**" if fusion_differs(row) else ""
            lines.append(f"| {_short(row['producer'], 60)} -> {_short(row['consumer'], 60)} [{row['rule']}]{mark} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _odd_one(row: dict, name: str) -> bool:
    """Whether profile ``name``'s verdict on ``row`` is not the most common one."""
    verdicts = [p["verdict"] for p in row["profiles"].values()]
    common = max(set(verdicts), key=verdicts.count)
    return row["profiles"][name]["verdict"] != common


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--models", nargs="+", help="corpus models (NAME or corpus:NAME; default all)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--markdown-only", action="store_true",
                        help="rewrite profile_differences.md from the JSON already in --out")
    args = parser.parse_args()
    if args.markdown_only:
        result = json.loads((args.out / "profile_differences.json").read_text())
        (args.out / "profile_differences.md").write_text(markdown(result))
        return 0

    from tvm_fusion_hw.models import corpus  # pylint: disable=import-outside-toplevel

    from tvm_fusion_hw.hardware.profile import known_profiles, load_profile  # pylint: disable=import-outside-toplevel

    profiles = [load_profile(n) for n in known_profiles()]
    names = [m.removeprefix("corpus:") for m in args.models] if args.models else corpus.names()
    unknown = sorted(set(names) - set(corpus.names()))
    if unknown:
        parser.error(f"not corpus models: {', '.join(unknown)} (known: {', '.join(corpus.names())})")
    entries = []
    for name in names:
        for batch in args.batches:
            start = time.perf_counter()
            try:
                entries.append(model_differences(name, batch, profiles))
            except Exception as err:  # noqa: BLE001  # one model's failure is a row, not the end
                entries.append({"model": name, "batch": batch, "error": f"{type(err).__name__}: {err}",
                                "kernels": {}, "differences": []})
            failed = f", FAILED: {entries[-1]['error']}" if "error" in entries[-1] else ""
            print(f"{name} b{batch}: {len(entries[-1]['differences'])} differing decisions "
                  f"({time.perf_counter() - start:.0f}s{failed})", file=sys.stderr, flush=True)
    result = {"profiles": [p.name for p in profiles], "batches": args.batches, "models": names,
              "ridge": {p.name: p.ridge_point_flop_per_byte for p in profiles}, "entries": entries,
              "models_with_a_difference": sorted({e["model"] for e in entries if e["differences"]})}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile_differences.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    (args.out / "profile_differences.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
