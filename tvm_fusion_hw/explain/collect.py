"""One profile's plan of a model, gathered the way a user's build makes it.

The model is built with :func:`pipeline.get_pipeline` under :func:`pipeline.pass_context`, as
``tvm-fusion-hw compile`` builds it; the fusion report and the schedule log of that build are the
plan (a complex pair its template could not schedule is already staged in them). The built
executable is measured (:func:`feedback.kernel_resources.measure`: ptxas for CUDA, the AMDGPU
metadata for ROCm), and each template's tile is asked of the template that took the kernel, on the
kernel as fused. Without a toolchain the plan still comes, with a note: no nvcc (or NVRTC) means
no register counts; no ROCm linker means no build, so the fusion pass and the schedule rules run
alone (each kernel's rule as the build would pick it, less the check that builds it).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Sequence

import tvm

from tvm_fusion_hw import pipeline
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.feedback.kernel_resources import (
    KernelResources,
    measure,
    occupancy_of,
)
from tvm_fusion_hw.fusion.fuse_pass import HardwareAwareFuseOps
from tvm_fusion_hw.guarded_schedule import (
    ScheduleLog,
    TemplateFallbackWarning,
    dlight_rules,
    schedule_kernel,
)
from tvm_fusion_hw.hardware.profile import HardwareProfile, load_profile
from tvm_fusion_hw.hardware.target import target as make_target
from tvm_fusion_hw.hardware.toolchain import have_rocm_toolchain
from tvm_fusion_hw.schedules import default_rules

from .model import KernelRow, Measured, PlanView, StockRow
from .stock import StockKernel

#: TVM names a PrimFunc's GPU functions ``<name>_kernel``, ``<name>_kernel_1``, ...
_KERNEL_SUFFIX = re.compile(r"_kernel(_?\d+)?$")


def plan_label(profile: str, knobs: dict[str, object]) -> str:
    """A column's name: the profile, and the knobs given to its fusion pass."""
    def text(value) -> str:
        return "+".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)

    return profile + (" (" + ", ".join(f"{k}={text(v)}" for k, v in sorted(knobs.items())) + ")" if knobs else "")


def roofline_seconds(flops: float, nbytes: float, profile: HardwareProfile) -> float:
    """The larger of the compute and the DRAM time: the kernel's roofline bound."""
    return max(flops / profile.peak_fp32_flop_per_s, nbytes / profile.dram_bytes_per_s)


def _worth_a_note(category) -> bool:
    """A warning a user of the plan should read (not a leaked file, not a deprecation)."""
    return issubclass(category, UserWarning) and not issubclass(category, TemplateFallbackWarning)


def _one_line(message) -> str:
    text = str(message).strip().splitlines()
    return text[0] if text else ""


class _Build:
    """What building (or, without a toolchain, fusing and scheduling) the model left."""

    def __init__(self, report, log: ScheduleLog, templates: Sequence, fuse: HardwareAwareFuseOps,
                 executable=None, notes: list[str] | None = None):
        self.report, self.log, self.templates, self.fuse = report, log, list(templates), fuse
        self.executable, self.notes = executable, notes or []


def _build(mod: tvm.IRModule, tgt: tvm.target.Target, knobs: dict[str, object], progress, label: str) -> _Build:
    fuse = pipeline.fusion_pass(tgt, **knobs)
    stage = progress.stage if progress is not None else (lambda *a, **k: contextlib.nullcontext())
    if tgt.kind.name == "rocm" and not have_rocm_toolchain():
        with stage(f"fuse and schedule for {label} (no ROCm toolchain: no build)"):
            fused = pipeline.fused_module(mod, tgt, fuse)
            log, templates = ScheduleLog(), default_rules()
            with tgt, warnings.catch_warnings(record=True):
                for name in dict.fromkeys(pipeline.kernel_names(fused)):
                    schedule_kernel(name, fused[name], tgt, templates, dlight_rules(), "none", log)
        note = ("not built: no ROCm linker or device libraries here (scripts/install-system-deps.sh); "
                "no measured registers, and each kernel's rule is the first that schedules it, unbuilt")
        return _Build(fuse.report, log, templates, fuse, notes=[note])
    built = pipeline.get_pipeline(tgt, fuse_pass=fuse)
    with pipeline.pass_context(tgt), stage(f"fuse, schedule and build for {label}", instrument_passes=True), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executable = tvm.compile(mod, target=tgt, relax_pipeline=built)
    # a template's fallback is in the schedule log (and the kernel's row); other warnings are notes
    notes = [_one_line(w.message) for w in caught if _worth_a_note(w.category)]
    return _Build(fuse.report, built.schedule_pass.log, built.schedule_pass.templates, fuse, executable,
                  [n for n in dict.fromkeys(notes) if n])


def _measure(build: _Build, tgt, profile: HardwareProfile) -> dict[str, Measured]:
    """Per PrimFunc, the worst of its GPU functions as the compiler allocated them."""
    if build.executable is None:
        return {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            found: list[KernelResources] = measure(build.executable, tgt)
        except FusionHWError as err:
            build.notes.append(f"not measured: {err}")
            found = []
    build.notes += [f"measurement: {_one_line(w.message)}" for w in caught if _worth_a_note(w.category)]
    if not found and not any(n.startswith(("not measured", "measurement")) for n in build.notes):
        build.notes.append("not measured: the build holds no GPU kernels to measure")
    by_func: dict[str, list[KernelResources]] = {}
    for kr in found:
        by_func.setdefault(_KERNEL_SUFFIX.sub("", kr.name), []).append(kr)
    result = {}
    for func, kernels in by_func.items():
        occupancies = []
        for kr in kernels:
            with contextlib.suppress(FusionHWError):  # threads per block unknown
                occupancies.append(occupancy_of(kr, profile))
        low = min(occupancies, key=lambda o: o.occupancy) if occupancies else None
        worst = max(kernels, key=lambda k: k.registers)
        result[func] = Measured(
            registers=worst.registers,
            spill_bytes=max(k.spill_store_bytes + k.spill_load_bytes for k in kernels),
            stack_frame_bytes=max(k.stack_frame_bytes for k in kernels),
            shared_bytes=max(k.shared_bytes for k in kernels),
            threads_per_block=worst.threads_per_block or worst.max_threads_per_block,
            occupancy=round(low.occupancy, 4) if low else None,
            occupancy_limiter=low.limiter if low else "",
            source=worst.source if worst.source != "ptxas" else f"ptxas ({worst.compiler})",
            gpu_functions=len(kernels))
    return result


def _fused(mod: tvm.IRModule, tgt, build: _Build) -> tvm.IRModule:
    """The module fused as the build fused it (its final knobs: pairs it staged stay staged)."""
    fuse = build.fuse
    again = HardwareAwareFuseOps(fuse.profile, planners=fuse.planners, **fuse.config.__dict__)
    return pipeline.fused_module(mod, tgt, again)


def _in_call_order(rows: list[KernelRow], calls: list[str]) -> list[KernelRow]:
    """The kernels in the order ``main`` calls them (the report lists groups as it formed them)."""
    slots: dict[str, list[int]] = {}
    for position, name in enumerate(calls):
        slots.setdefault(name, []).append(position)
    keyed = [(slots[r.kernel].pop(0) if slots.get(r.kernel) else len(calls) + i, r) for i, r in enumerate(rows)]
    return [r for _, r in sorted(keyed, key=lambda pair: pair[0])]


def _tiles(fused: tvm.IRModule, tgt, build: _Build) -> dict[str, tuple]:
    """Per kernel a template scheduled: (its tile in words, its modelled time or None)."""
    tiles: dict[str, tuple] = {}
    names = {gv.name_hint for gv in fused.get_global_vars()}
    for name, rule_name in build.log.rules.items():
        rule = next((r for r in build.templates if type(r).__name__ == rule_name), None)
        if rule is None or not hasattr(rule, "plan") or name not in names:
            continue
        with tgt:
            try:
                planned = rule.plan(fused[name], tgt)
            except Exception as err:  # noqa: BLE001 (a template may raise anything; the plan goes on)
                build.notes.append(f"{name}: {rule_name} gave no tile here ({_one_line(err)})")
                continue
        if planned is not None:
            tile = planned[1]
            text = tile.summary() if hasattr(tile, "summary") else str(tile)
            tiles[name] = (text, getattr(tile, "time_s", None))
    return tiles


def collect_plan(mod: tvm.IRModule, profile_name: str, stock: list[StockKernel],
                 knobs: dict[str, object] | None = None, progress=None) -> PlanView:
    """The plan of ``mod`` (a Relax module as imported) on one profile, with stock's kernels of
    the same module (:func:`.stock.stock_kernels`) placed on its roofline."""
    knobs = dict(knobs or {})
    profile = load_profile(profile_name)
    tgt = make_target(profile_name)
    label = plan_label(profile.name, knobs)
    build = _build(mod, tgt, knobs, progress, label)
    stage = progress.stage if progress is not None else (lambda *a, **k: contextlib.nullcontext())
    with stage(f"measure kernels and ask each template its tile ({label})"):
        measured = _measure(build, tgt, profile)
        fused = _fused(mod, tgt, build)
        tiles = _tiles(fused, tgt, build)
    report = build.report
    stock_of: dict[str, list[str]] = {}
    for kernel in stock:
        for binding in kernel.bindings:
            stock_of.setdefault(binding, []).append(kernel.name)
    rows = []
    for group in report.groups:
        tile, time_s = tiles.get(group.kernel, ("", None))
        symbolic = group.regime == "symbolic"
        bound = 0.0 if symbolic else roofline_seconds(group.flops, group.compulsory_bytes, profile)
        rows.append(KernelRow(
            kernel=group.kernel, group=group.name, ops=list(group.members), bindings=list(group.ops),
            kinds=group.kinds, flops=group.flops, compulsory_bytes=group.compulsory_bytes,
            intensity=group.intensity, regime=group.regime, estimated_registers=group.estimated_registers,
            measured=measured.get(group.kernel), schedule_rule=build.log.rules.get(group.kernel, ""),
            tile=tile, fallbacks=[f"{f.rule} at {f.stage}: {f.error}" for f in build.log.fallbacks_of(group.kernel)],
            modelled_s=time_s if time_s else bound,
            modelled_from=f"{build.log.rules.get(group.kernel)} tile model" if time_s else "roofline bound",
            stock_kernels=list(dict.fromkeys(k for b in group.ops for k in stock_of.get(b, ())))))
    sources = sorted({m.source for m in measured.values()})
    return PlanView(
        label=label, profile=profile.name, display_name=profile.display_name,
        peak_flop_per_s=profile.peak_fp32_flop_per_s, dram_bytes_per_s=profile.dram_bytes_per_s,
        ridge_flop_per_byte=profile.ridge_point_flop_per_byte, knobs=knobs, budgets=report.all_budgets(),
        kernels=_in_call_order(rows, pipeline.kernel_names(fused)), decisions=list(report.decisions),
        stock=[StockRow(k.name, list(k.ops), list(k.bindings), k.flops, k.compulsory_bytes, k.intensity,
                        roofline_seconds(k.flops, k.compulsory_bytes, profile)) for k in stock],
        notes=build.notes, measured_with=", ".join(sources),
        policy={k: v for k, v in build.fuse.config.__dict__.items() if isinstance(v, (int, float, str, bool))})
