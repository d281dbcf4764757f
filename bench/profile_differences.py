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
import sys
import time
import warnings
from pathlib import Path

#: the figures of a decision worth a column: what the per-profile rules test
DECIDING = ("ridge_flop_per_byte", "break_even_ridge_flop_per_byte", "cost_fused_us", "cost_apart_us",
            "recompute", "occupancy_drop", "fused_occupancy", "unfused_occupancy", "fused_shared_bytes",
            "shared_bytes_per_block_limit", "plan_registers_per_thread", "estimated_registers",
            "register_budget", "ops", "depth_cap")


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
    rows = []
    for row in align_decisions(plans):
        if not row.differs:
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
    return {"model": name, "batch": batch, "kernels": kernels, "differences": rows}


def _verdict(decision) -> str:
    return "FUSE" if decision.fused else ("stage" if decision.staged else "apart")


def _short(text: str, limit: int = 220) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def markdown(result: dict) -> str:
    """The table: counts first, then per model the decisions that differ."""
    names = result["profiles"]
    entries = result["entries"]
    lines = ["# Fusion decisions that differ between profiles", "",
             (f"Corpus: {len(result['models'])} models x batch {', '.join(map(str, result['batches']))} x "
              f"{len(names)} profiles, fusion only (no build). Reproduce: see README.md here."), ""]
    for batch in result["batches"]:
        at = [e for e in entries if e["batch"] == batch]
        differ = [e for e in at if e["differences"]]
        lines.append(f"- batch {batch}: {len(differ)} of {len(at)} models have at least one decision "
                     f"that differs between profiles")
    any_batch = {e["model"] for e in entries if e["differences"]}
    lines += [f"- either batch: {len(any_batch)} of {len(result['models'])} models", ""]
    lines += [("Models with a difference, per profile (the profile's verdict differs from the most "
               "common one on at least one decision; kernels per profile in the JSON):"), "",
              "| profile | ridge FLOP/B | models (b1) | models (b32) |", "| --- | ---: | ---: | ---: |"]
    for name in names:
        counts = []
        for batch in result["batches"][:2]:
            counts.append(sum(1 for e in entries if e["batch"] == batch and any(
                _odd_one(r, name) for r in e["differences"])))
        lines.append(f"| {name} | {result['ridge'][name]:.1f} | " + " | ".join(map(str, counts)) + " |")
    lines.append("")
    for entry in entries:
        if not entry["differences"]:
            continue
        lines += [f"## {entry['model']}, batch {entry['batch']}", "",
                  "kernels: " + ", ".join(f"{k} {v}" for k, v in entry["kernels"].items()), "",
                  "| decision | " + " | ".join(names) + " | why |",
                  "| --- | " + " | ".join("---" for _ in names) + " | --- |"]
        for row in entry["differences"]:
            verdicts = [row["profiles"][n]["verdict"] for n in names]
            lines.append(f"| {_short(row['producer'], 60)} -> {_short(row['consumer'], 60)} [{row['rule']}] | "
                         + " | ".join(verdicts) + f" | {_short(row['why'], 400)} |")
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
    parser.add_argument("--models", nargs="+")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    args = parser.parse_args()

    from tvm_fusion_hw.models import corpus  # pylint: disable=import-outside-toplevel

    from tvm_fusion_hw.hardware.profile import known_profiles, load_profile  # pylint: disable=import-outside-toplevel

    profiles = [load_profile(n) for n in known_profiles()]
    names = args.models or corpus.names()
    entries = []
    for name in names:
        for batch in args.batches:
            start = time.perf_counter()
            try:
                entries.append(model_differences(name, batch, profiles))
            except Exception as err:  # noqa: BLE001  # one model's failure is a row, not the end
                entries.append({"model": name, "batch": batch, "error": f"{type(err).__name__}: {err}",
                                "kernels": {}, "differences": []})
            print(f"{name} b{batch}: {len(entries[-1]['differences'])} differing decisions "
                  f"({time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
    result = {"profiles": [p.name for p in profiles], "batches": args.batches, "models": names,
              "ridge": {p.name: p.ridge_point_flop_per_byte for p in profiles}, "entries": entries,
              "models_with_a_difference": sorted({e["model"] for e in entries if e["differences"]})}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile_differences.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    (args.out / "profile_differences.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
