"""Register feedback: build, measure every kernel, split the fused groups that measured badly.

Rule 2 of the rules file, with the compiler's numbers (:mod:`.kernel_resources`) in place of the
policy's estimates: "if fusion drops occupancy by more than 20%, it most likely spilled or
over-allocated: split". :func:`compile_with_feedback`:

1. builds the module once with ``max_depth=1`` (all else alike) and measures these unfused parts;
2. builds it with :class:`HardwareAwareFuseOps`; a pass instrument keeps the module before and after
   the pass, which tells the bindings of every call of a fused function (the group's key);
3. measures every kernel: TVM names a fused PrimFunc after its grouped function and its kernels
   ``<name>_kernel`` (``_kernel_1``, ...), so kernels map back to groups, and a group's parts are
   the kernels that computed its bindings in the unfused build;
4. splits a group of two or more ops when its kernel spills (more than its parts do), or when its
   occupancy is more than ``max_occupancy_drop`` below the lowest of its parts': the next build
   gets it in ``split_groups`` and no group may hold more than half of its ops (staged fusion: one
   global round trip between the pieces, whose figures are the split's "after"). It repeats until
   nothing needs splitting or ``max_rounds`` builds are done.

Without measurements (no nvcc or NVRTC for CUDA, no ROCm code object) one round is built and the
plan rests on the policy's estimates alone; a warning and the report say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tvm
from tvm import relax

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.fusion.decisions import FusionReport, SplitRecord
from tvm_fusion_hw.fusion.fuse_pass import HardwareAwareFuseOps
from tvm_fusion_hw.fusion.graph import CALL_TIR, COMM_REDUCE, OUT_EWISE_FUSABLE
from tvm_fusion_hw.fusion.policy import GroupSplit
from tvm_fusion_hw.hardware.profile import HardwareProfile
from tvm_fusion_hw.pipeline import extended_pass_context, fusion_pass, get_pipeline

from . import kernel_resources
from .kernel_resources import KernelResources, occupancy_of

_KERNEL_SUFFIX = re.compile(r"_kernel(_?\d+)?$")
Figures = Dict[str, object]


@dataclasses.dataclass
class Plan:
    """What the fusion pass made of a module: its groups, and which function computes each binding."""

    #: (fused function, binding names of the ops of one call of it): a function made for a group is
    #: shared by every structurally equal group (BlockBuilder dedups), so one entry per call
    groups: List[Tuple[str, Tuple[str, ...]]]
    function_of: Dict[str, str]  # binding name -> the function that computes it (fused or the op's own)
    #: bindings of complex ops (TVM's reduce and out-element-wise-fusable patterns)
    complex_ops: set = dataclasses.field(default_factory=set)

    def is_complex_pair(self, names: Sequence[str]) -> bool:
        """Two complex ops in one group: a pair the policy fused for a template's own tile."""
        return sum(name in self.complex_ops for name in names) >= 2

    def ops(self, function: str) -> int:
        return next((len(names) for fn, names in self.groups if fn == function), 1)

    def pieces(self, names: Sequence[str]) -> List[str]:
        """The functions that compute ``names``, in order, once each."""
        return list(dict.fromkeys(self.function_of[n] for n in names if n in self.function_of))


@dataclasses.dataclass
class FeedbackRound:
    """One build of the loop: its kernels as measured, and its fused groups' figures."""

    number: int
    kernels: List[KernelResources]
    groups: List[Figures]  # one per group: "function", "members", "registers", "occupancy", "parts_*"
    split: List[str]  # fused functions this round found wanting (split in the next)


@dataclasses.dataclass
class FeedbackResult:
    """The last round's executable and report (with ``report.splits``), and every round."""

    executable: object
    report: FusionReport
    rounds: List[FeedbackRound]


@tvm.instrument.pass_instrument
class _AroundFusion:
    """Keeps the module as HardwareAwareFuseOps found it and as it left it."""

    before = after = None

    def run_before_pass(self, mod, info):
        self.before = mod if info.name == "HardwareAwareFuseOps" else self.before

    def run_after_pass(self, mod, info):
        self.after = mod if info.name == "HardwareAwareFuseOps" else self.after


def _is_primitive(func) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and "Primitive" in func.attrs


def _bindings(func: relax.Function) -> List[relax.Binding]:
    return [b for block in func.body.blocks for b in block.bindings]


def _plan(before: tvm.IRModule, after: tvm.IRModule) -> Plan:
    """Each call of a fused function: its outputs, traced back through the unfused bindings up to
    its arguments, are the group's bindings (names survive the pass; a shared body would not tell)."""
    plan = Plan([], {})
    for gvar, func in after.functions.items():
        if not isinstance(func, relax.Function) or _is_primitive(func):
            continue
        old = _bindings(before[gvar.name_hint])
        for b in old:
            value = b.value
            if isinstance(value, relax.Call) and value.op.same_as(CALL_TIR):
                attrs = before[value.args[0]].attrs
                if attrs is not None and int(attrs.get("op_pattern", 8)) in (COMM_REDUCE, OUT_EWISE_FUSABLE):
                    plan.complex_ops.add(b.var.name)
        reads = {b.var.name: [v.name for v in relax.analysis.free_vars(b.value)] for b in old}
        order = {b.var.name: k for k, b in enumerate(old) if not isinstance(b.value, relax.TupleGetItem)}
        new = _bindings(func)
        for binding in new:
            call = binding.value if isinstance(binding.value, relax.Call) else None
            if call is not None and isinstance(call.op, tvm.ir.GlobalVar) and _is_primitive(after[call.op]):
                stack = [binding.var.name] + [b.var.name for b in new if isinstance(b.value, relax.TupleGetItem)
                                              and b.value.tuple_value.same_as(binding.var)]
                stop, seen = {v.name for v in relax.analysis.free_vars(call)}, set()
                while stack:
                    name = stack.pop()
                    if name not in seen and name not in stop and name in reads:
                        seen.add(name)
                        stack += reads[name]
                names = tuple(sorted((n for n in seen if n in order), key=order.get))
                plan.groups.append((call.op.name_hint, names))
                plan.function_of.update({name: call.op.name_hint for name in names})
            elif call is not None and call.op.same_as(CALL_TIR) and isinstance(call.args[0], tvm.ir.GlobalVar):
                plan.function_of[binding.var.name] = call.args[0].name_hint  # one op: its own PrimFunc
    return plan


def _build(mod, target, fuse: HardwareAwareFuseOps, progress, title: str, schedules: bool = True):
    keep = _AroundFusion()
    if progress is not None:
        progress.total = max(progress.total, progress.done + 1)  # the loop decides how many builds
    with progress.stage(title, instrument_passes=True) if progress else contextlib.nullcontext():
        with extended_pass_context(instruments=[keep]):  # keep the caller's options and instruments
            pipeline = get_pipeline(target, fuse_pass=fuse, schedules=schedules)
            executable = tvm.compile(mod, target=target, relax_pipeline=pipeline)
    return executable, _plan(keep.before, keep.after)


def _measure(measure: Callable, executable, target) -> Optional[List[KernelResources]]:
    with contextlib.suppress(FusionHWError):  # a target kind with no measurements (llvm)
        return list(measure(executable, target)) or None
    return None


def _figures(function: str, kernels: List[KernelResources], profile: HardwareProfile, ops: int) -> Figures:
    """The worst of a function's kernels: most registers and spills, least occupancy."""
    occupancies = []
    for kr in kernels:
        with contextlib.suppress(FusionHWError):  # block size unknown: no occupancy for it
            occupancies.append(occupancy_of(kr, profile))
    low = min(occupancies, key=lambda o: o.warps_per_multiprocessor) if occupancies else None
    return {"function": function, "ops": ops, "kernels": ", ".join(k.name for k in kernels),
            "registers": max(k.registers for k in kernels),
            "spill_bytes": max(k.spill_store_bytes + k.spill_load_bytes for k in kernels),
            "occupancy": round(low.occupancy, 3) if low else -1.0,
            "warps": low.warps_per_multiprocessor if low else -1}


class _Measured:
    """One round's kernels by function, with the figures of any function or piece."""

    def __init__(self, plan: Plan, kernels: List[KernelResources], profile: HardwareProfile):
        self.plan, self.profile = plan, profile
        self.kernels: Dict[str, List[KernelResources]] = {}
        for kr in kernels:
            self.kernels.setdefault(_KERNEL_SUFFIX.sub("", kr.name), []).append(kr)

    def of(self, function: str) -> Optional[Figures]:
        found = self.kernels.get(function)
        return _figures(function, found, self.profile, self.plan.ops(function)) if found else None

    def parts(self, names: Sequence[str]) -> Optional[Figures]:
        """The kernels that compute ``names`` taken together (the group's unfused parts)."""
        found = [kr for fn in self.plan.pieces(names) for kr in self.kernels.get(fn, [])]
        if not found:
            return None
        fig = _figures("parts", found, self.profile, len(names))
        return {"parts_" + k: fig[k] for k in ("kernels", "registers", "spill_bytes", "occupancy", "warps")}


def _describe(group: Figures) -> str:
    parts = (f" (parts: {group['parts_registers']} regs, {group['parts_occupancy']:.0%})"
             if "parts_registers" in group else "")
    site = f" up to {group['members'][-1]}" if group.get("members") else ""  # calls may share a function
    rule = f"; occupancy rule {group['occupancy_rule']}" if "occupancy_rule" in group else ""
    return (f"{group['function']} ({group['ops']} ops{site}): {group['registers']} regs, {group['spill_bytes']} B "
            f"spilled, occupancy {group['occupancy']:.0%}{parts}{rule}")


def _verdict(group: Figures, max_drop: float, complex_pair: bool = False) -> Optional[str]:
    """Why a measured group (with its parts' figures) must be split, or None.

    A complex pair (conv + pool) runs a template that trades occupancy for a register tile on
    purpose (measured 2.9x faster than stock's two kernels on an H200 at 25% occupancy): only a
    spill splits it.
    """
    if group["spill_bytes"] > group.get("parts_spill_bytes", 0):  # a part that spills alone: no cure
        return f"spills {group['spill_bytes']} B to local memory"
    if complex_pair:
        group["occupancy_rule"] = "not applied: a complex pair's template chooses its own tile"
        return None
    if group["warps"] > 0 and group.get("parts_warps", -1) > 0:
        # From whole warps, as the policy's complex-pair check, so a drop of exactly the limit holds.
        drop = group["occupancy_drop"] = round(1 - group["warps"] / group["parts_warps"], 6)
        if drop > max_drop:
            return f"occupancy drops {drop:.0%} > {max_drop:.0%} below its parts'"
    return None


def compile_with_feedback(mod: tvm.IRModule, target: tvm.target.Target, max_rounds: int = 3, progress=None,
                          measure: Optional[Callable] = None, schedules: bool = True,
                          **knobs) -> FeedbackResult:
    """Compile ``mod`` with hardware-aware fusion, splitting the groups whose kernels measure badly.

    Parameters
    ----------
    mod : tvm.IRModule
        The Relax module.
    target : tvm.target.Target
        A target made by :func:`tvm_fusion_hw.hardware.target` (cuda or rocm).
    max_rounds : int
        Most builds of the loop (the one build of the unfused parts is not counted).
    progress : tvm_fusion_hw.progress.Progress, optional
        Prints one stage line per build.
    measure : callable, optional
        ``measure(executable, target) -> [KernelResources]``; :func:`.kernel_resources.measure` if omitted.
    schedules : bool
        Schedule with the plugin's templates (as :func:`.get_pipeline` does by default); False
        measures dlight's schedules of the same groups.
    **knobs
        Fields of :class:`~tvm_fusion_hw.PolicyConfig`, for every build.

    Returns
    -------
    FeedbackResult
        ``report.splits``: each split, measured before and after; ``report.feedback``: what measured,
        and the figures of every group kept fused.
    """
    if max_rounds < 1:
        raise FusionHWError(f"max_rounds must be at least 1, got {max_rounds}")
    measure = measure or kernel_resources.measure
    splits = tuple(knobs.pop("split_groups", ()))
    rounds: List[FeedbackRound] = []
    records: List[SplitRecord] = []
    # The unfused parts first, so that the last build is the plan's (the last pass's report is its report).
    base_fuse = fusion_pass(target, **{**knobs, "max_depth": 1})
    base_ex, base_plan = _build(mod, target, base_fuse, progress, "feedback: compile the unfused parts",
                                schedules)
    base_kernels = _measure(measure, base_ex, target)
    baseline = _Measured(base_plan, base_kernels or [], base_fuse.profile)
    for number in range(1, max_rounds + 1):
        fuse = fusion_pass(target, **knobs, split_groups=splits)
        executable, plan = _build(mod, target, fuse, progress, f"feedback round {number}: compile", schedules)
        report = fuse.report
        kernels = _measure(measure, executable, target) if base_kernels else None
        if kernels is None:
            note = ("no kernel measurements here (CUDA needs nvcc or NVRTC, ROCm a code object): "
                    "one round, the plan rests on the policy's register estimates only")
            warnings.warn(note, stacklevel=2)
            report.feedback.append(note)
            rounds.append(FeedbackRound(number, [], [], []))
            break
        now = _Measured(plan, kernels, fuse.profile)
        for record in records:  # the pieces of last round's splits, measured now
            if record.round == number - 1:
                record.after = [f for f in map(now.of, plan.pieces(record.members)) if f]
        groups = [{**f, "members": names} for fn, names in plan.groups if len(names) > 1 and (f := now.of(fn))]
        found = []
        for group in groups:
            group.update(baseline.parts(group["members"]) or {})
            group["verdict"] = _verdict(group, fuse.config.max_occupancy_drop,
                                        plan.is_complex_pair(group["members"]))
            found += [group] if group["verdict"] else []
        rounds.append(FeedbackRound(number, kernels, groups,
                                    [g["function"] for g in found] if number < max_rounds else []))
        if not found or number == max_rounds:
            report.feedback += [f"{'still over, no round left' if g['verdict'] else 'kept'}: {_describe(g)}"
                                for g in groups]
            break
        for group in found:
            names, why = group["members"], group["verdict"]
            figures = tuple((k, v) for k, v in group.items() if isinstance(v, (int, float)))
            reason = f"measured in round {number}: {_describe(group)}: {why}"
            splits += (GroupSplit(names, reason, figures),)
            before = {k: v for k, v in group.items() if k not in ("members", "verdict")}
            records.append(SplitRecord(number, group["function"], list(names), why, before))
    if rounds[-1].kernels:
        source = ", ".join(sorted({f"{k.source} ({k.compiler})" if k.compiler else k.source
                                   for k in rounds[-1].kernels}))
        report.feedback.insert(0, f"{len(rounds)} round(s) measured by {source}; unfused parts: the same "
                                  "module built with max_depth=1")
    report.splits = records
    return FeedbackResult(executable, report, rounds)
