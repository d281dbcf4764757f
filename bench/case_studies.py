"""The seed's case studies per profile (issue 15): measured on the H200, modelled for the others.

The rules file's four claims (``../shared/fusion-rules.md``), each a micro-graph of the zoo built
with the plans the claim compares (bundle variants of the hardware-aware pipeline):

* LayerNorm + Add + residual fused into one kernel, against three kernels;
* five element-wise ops in one kernel, against two groups of 2-3 ops (and one kernel per op);
* the MobileNetV2 bottleneck: depthwise + ReLU6 | pointwise, against three in one kernel and
  against depthwise | ReLU6 | pointwise;
* conv + ReLU + 2x2 max-pool in one kernel, against the conv and the pool apart.

Each plan is timed on the H200 (the runner's median, and per kernel with ``--kernel-profile``) and
its DRAM bytes measured there with Nsight Compute (``dram__bytes_read.sum +
dram__bytes_write.sum`` per kernel, caches flushed before each kernel). On every profile its time
is **modelled** from those measurements, per kernel: max(the kernel's H200 time x the H200's FP32
peak / the profile's, its bytes / the profile's bandwidth), summed. The H200 time stands for the
kernel's work (recomputation and a template's inefficiency included), scaled by compute; the bytes
are the floor the profile's DRAM sets. Registers and occupancy do not move with the profile in
this model, so the element-wise claim (which is about them) is judged on the H200's measurement.

    python bench/case_studies.py plan [--out .bundle_cases]      # the builds and device commands
    python bench/case_studies.py report --bundle .bundle_cases --results OUT/results.json \\
        --ncu OUT/dram.csv [--out cases.md]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
BATCHES = (1, 32)
BUNDLE_PROFILE = "nvidia-h200"

#: (case, model, the claim, [(plan name, what it is, knobs or None for the default build)],
#: the plan the claim says wins)
CASES = (
    ("LayerNorm + Add + residual", "layernorm_residual",
     "one kernel, intermediates in registers: latency -40% against three kernels",
     [("hw", "hw's plan", None), ("ln_split", "one kernel per op", "max_depth=1")], "hw"),
    ("five element-wise ops", "eltwise5",
     "one kernel of five ops doubles registers and halves occupancy: two groups of 2-3 ops are faster",
     [("hw", "hw's plan", None), ("ew5_two", "groups of at most 3 ops", "max_depth=3"),
      ("ew5_split", "one kernel per op", "max_depth=1")], "ew5_two"),
    ("MobileNetV2 bottleneck", "dw_pw",
     "depthwise + ReLU6 in one kernel, pointwise apart: -25%; all three in one kernel is slower",
     [("hw", "hw's plan", None), ("dwpw_three", "depthwise, ReLU6 and pointwise in one kernel",
                                  "pair_cost=false"),
      ("dwpw_split", "one kernel per op", "max_depth=1")], "hw"),
    ("conv + ReLU + 2x2 max-pool", "conv_relu_pool",
     "one kernel saves the conv output's global write and read",
     [("hw", "hw's plan", None), ("cp_apart", "conv and pool apart", "fuse_complex_pairs=false")], "hw"),
)


def _bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variant_args() -> List[str]:
    """The bundle's ``--variant`` arguments: every plan but hw's own build."""
    return [f"{name}:{model}:{knobs}" for _, model, _, plans, _ in CASES for name, _, knobs in plans if knobs]


def commands(bundle: str) -> Dict[str, str]:
    """The bundle command here and the device commands (timing with per-kernel times, then ncu)."""
    models = " ".join(model for _, model, _, _, _ in CASES)
    sel = f"--models {models} --batches {' '.join(map(str, BATCHES))}"
    metrics = ",".join(_bench_module("emulated_limits").NCU_METRICS)
    return {
        "build": (f"nice -n 5 .venv/bin/tvm-fusion-hw bundle --out {bundle} {sel} --profile {BUNDLE_PROFILE} "
                  "--no-graph " + " ".join(f"--variant {v}" for v in variant_args())),
        "time": f"python3 {bundle}/run.py --out case-results {sel} --no-graph --no-torch --kernel-profile",
        "ncu": (f"ncu --metrics {metrics} --cache-control all --csv --page raw --print-units base "
                f"--log-file case-results/dram.csv python3 {bundle}/run.py --out case-ncu {sel} --no-graph "
                "--no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0"),
        "report": (f".venv/bin/python bench/case_studies.py report --bundle {bundle} --results "
                   "case-results/results.json --ncu case-results/dram.csv --out case-results/case_studies.md"),
    }


def report(bundle: Path, results: dict, ncu_text: Optional[str], profiles: Sequence[str],
           runs: int = 3) -> str:
    """The markdown tables (see the module docstring)."""
    from tvm_fusion_hw.hardware.profile import load_profile  # pylint: disable=import-outside-toplevel
    emu = _bench_module("emulated_limits")
    manifest = json.loads((bundle / "manifest.json").read_text())
    entries = {(e["model"], e["batch"]): e for e in manifest["entries"]}
    rows = {(r["model"], r["batch"]): r for r in results.get("rows", [])}
    dram = emu.library_dram(entries, results, ncu_text, runs)
    profs = [load_profile(p) for p in profiles]
    h200 = load_profile(BUNDLE_PROFILE)
    out = [f"# The seed's case studies: measured on the H200, modelled for {len(profs) - 1} other profiles", "",
           f"Bundle {bundle} (commit {manifest.get('commit')}). H200 ms: the runner's median. DRAM MB: ncu's "
           "dram__bytes_read.sum + dram__bytes_write.sum of one main run, caches flushed before each kernel. "
           "Every profile's column is **modelled** (us): per kernel, max(its H200 time x the H200's FP32 peak / "
           "the profile's, its DRAM bytes / the profile's bandwidth), summed; registers and occupancy do not "
           "move with the profile in this model.", ""]
    for case, model, claim, plans, winner in CASES:
        for batch in BATCHES:
            key = (model, batch)
            entry, row = entries.get(key), rows.get(key, {})
            if entry is None:
                continue
            variants = {v["name"]: v for v in entry.get("variants", [])}
            out += [f"## {case}: `{model}` batch {batch}", "", f"Claim: {claim}.", "",
                    "| plan | kernels | H200 ms (measured) | DRAM MB (measured) | "
                    + " | ".join(f"{p.name} us (modelled)" for p in profs) + " |",
                    "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in profs) + " |"]
            modelled: Dict[str, List[Optional[float]]] = {}
            measured: Dict[str, Optional[float]] = {}
            for plan, what, _ in plans:  # a plan is named as its bundle variant (hw's own build: "hw")
                var = variants.get(plan, {})
                got = dram.get((key, plan), {})
                times = row.get("times_s", {})
                measured[plan] = None if plan in row.get("errors", {}) else times.get(plan)
                kernel_us = _kernel_us(row, plan)
                modelled[plan] = [_scaled_s(got["per_kernel"], kernel_us, h200, p)
                                  if "per_kernel" in got and kernel_us else None for p in profs]
                nbytes = got.get("bytes")
                out.append(f"| {what} (`{plan}`) | {len(var.get('launches') or []) or '-'} | "
                           f"{emu._ms(measured[plan])} | {'-' if nbytes is None else f'{nbytes / 1e6:.2f}'} | "
                           + " | ".join("-" if m is None else f"{m * 1e6:.1f}" for m in modelled[plan]) + " |")
            out += ["", _verdict(winner, plans, measured, modelled, profs), ""]
    return "\n".join(out) + "\n"


def _kernel_us(row: dict, variant: str) -> Dict[str, float]:
    """``{PrimFunc: us per main run}`` of ``variant``'s kernel profile (the runner's
    ``--kernel-profile``)."""
    prof = (row.get("kernels") or {}).get(variant) or {}
    return {k["name"]: k["us"] for k in prof.get("all", [])}


def _scaled_s(per_kernel: Dict[str, float], kernel_us: Dict[str, float], h200, profile) -> float:
    """The modelled time on ``profile`` (see the module docstring): ``per_kernel`` is ncu's bytes
    per CUDA kernel (``<PrimFunc>_kernel[_N]``), ``kernel_us`` the H200's time per PrimFunc."""
    nbytes: Dict[str, float] = {}
    for kernel, value in per_kernel.items():
        func = re.sub(r"_kernel(_\d+)?$", "", kernel)
        nbytes[func] = nbytes.get(func, 0.0) + value
    ratio = h200.peak_fp32_flop_per_s / profile.peak_fp32_flop_per_s
    return sum(max(kernel_us.get(func, 0.0) * 1e-6 * ratio, b / profile.dram_bytes_per_s)
               for func, b in nbytes.items())


def _verdict(winner: str, plans, measured: Dict, modelled: Dict, profs) -> str:
    """Where the claimed winner is the fastest plan: on the H200 measured, on each profile modelled."""
    names = [p for p, _, _ in plans]

    def fastest(times: Dict[str, Optional[float]]) -> Optional[str]:
        known = {n: t for n, t in times.items() if t is not None}
        return min(known, key=known.get) if len(known) == len(names) else None

    h200 = fastest(measured)
    holds, fails = [], []
    for i, prof in enumerate(profs):
        best = fastest({n: modelled[n][i] for n in names})
        if best is not None:
            (holds if best == winner else fails).append(prof.name)
    h200_text = "not measured" if h200 is None else ("holds" if h200 == winner else f"does not hold ({h200} is faster)")
    return (f"On the H200, measured: {h200_text}. Modelled, the claimed plan `{winner}` is fastest on: "
            f"{', '.join(holds) or 'none'}; not on: {', '.join(fails) or 'none'}.")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan", help="the bundle command and the device commands")
    pl.add_argument("--bundle", default=".bundle_cases")
    rp = sub.add_parser("report", help="the markdown tables from results.json and the ncu CSV")
    rp.add_argument("--bundle", required=True)
    rp.add_argument("--results", required=True)
    rp.add_argument("--ncu", help="ncu --csv output with the two DRAM metrics")
    rp.add_argument("--main-runs", type=int, default=3, help="main runs per library in the ncu run")
    rp.add_argument("--profiles", nargs="+", help="profiles to model (default: every shipped one)")
    rp.add_argument("--out", help="markdown file (default: stdout)")
    args = ap.parse_args(argv)
    if args.cmd == "plan":
        for key, cmd in commands(args.bundle).items():
            print(f"# {key}\n{cmd}\n")
        return 0
    from tvm_fusion_hw.hardware.profile import known_profiles  # pylint: disable=import-outside-toplevel
    profiles = args.profiles or [BUNDLE_PROFILE] + [p for p in known_profiles() if p != BUNDLE_PROFILE]
    text = report(Path(args.bundle), json.loads(Path(args.results).read_text()),
                  Path(args.ncu).read_text() if args.ncu else None, profiles, args.main_runs)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
