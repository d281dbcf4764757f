"""Which schedule each kernel gets, and why: the fusion report's counterpart for scheduling.

``get_pipeline`` schedules every fused PrimFunc with the first rule that takes it without failing
(:mod:`.guarded_schedule`): the plugin's templates (``tvm_fusion_hw.schedules``), then dlight's.
:func:`explain_schedules` asks the same rules, in the same order, about the same PrimFuncs and
returns, per kernel, the rule, the rules that failed on it first and why, and (for a template) the
tile its cost model chose with the modelled time. It repeats the fusion, the scheduling and each
template kernel's check, so it costs most of a compile.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import tvm

from .guarded_schedule import ScheduleLog, dlight_rules, schedule_kernel
from .pipeline import fused_module, fusion_pass, kernel_names
from .schedules import default_rules


@dataclasses.dataclass(frozen=True)
class ScheduleChoice:
    """The schedule of one kernel."""

    kernel: str  # the fused PrimFunc's name
    rule: str  # the rule that takes it: a template's or dlight's class name
    detail: str  # the template's tile in words; empty for dlight's rules
    fallbacks: Tuple[str, ...] = ()  # rules that failed on it first, each with its stage and error

    def __str__(self) -> str:
        text = f"{self.kernel}: {self.rule}" + (f": {self.detail}" if self.detail else "")
        return text + "".join(f"\n    (fell back: {f})" for f in self.fallbacks)


def explain_schedules(mod: tvm.IRModule, target: tvm.target.Target,
                      fuse_pass: Optional[tvm.transform.Pass] = None,
                      rules: Optional[Sequence] = None, verify: str = "build") -> List[ScheduleChoice]:
    """The schedule rule (and tile) of every kernel ``main`` of ``mod`` calls, in call order.

    Parameters
    ----------
    mod : tvm.IRModule
        The Relax module, as given to ``tvm.compile``.
    target : tvm.target.Target
        A cuda or rocm target (from :func:`tvm_fusion_hw.target`).
    fuse_pass : tvm.transform.Pass, optional
        The fusion pass; a fresh ``fusion_pass(target)`` if omitted.
    rules : sequence of ScheduleRule, optional
        The templates tried before dlight's rules, as ``get_pipeline(schedules=...)`` takes them;
        the plugin's defaults if omitted.
    verify : str
        As :func:`~tvm_fusion_hw.get_pipeline` checks a template's kernel (``"build"`` builds each
        one alone, so a template that would fail is reported as the pipeline would fall back).
    """
    fused = fused_module(mod, target, fuse_pass or fusion_pass(target))
    templates = list(default_rules() if rules is None else rules)
    log = ScheduleLog()
    choices, seen = [], set()
    for name in kernel_names(fused):
        if name in seen:
            continue
        seen.add(name)
        func = fused[name]
        with target:
            schedule_kernel(name, func, target, templates, dlight_rules(), verify, log)
            taker = log.rules.get(name, "")
            rule = next((r for r in templates if type(r).__name__ == taker), None)
            detail = log.plans.get(name, "")  # a template's tile and its modelled time
        label = taker if rule is not None else (f"dlight {taker}" if taker else "none")
        fell = tuple(f"{f.rule} at {f.stage}: {f.error}" for f in log.fallbacks_of(name))
        choices.append(ScheduleChoice(name, label, detail, fell))
    return choices
