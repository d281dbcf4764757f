"""Which schedule each kernel gets, and why: the fusion report's counterpart for scheduling.

``get_pipeline`` schedules every fused PrimFunc with the first rule that takes it: the plugin's
templates (``tvm_fusion_hw.schedules``), then dlight's. :func:`explain_schedules` asks the same
rules, in the same order, about the same PrimFuncs and returns, per kernel, the rule and (for a
template) the tile its cost model chose with the modelled time. Nothing is compiled; it repeats
the fusion and the rules' planning, so it costs part of a compile.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

import tvm

from tvm.s_tir import dlight as dl

from .pipeline import fused_module, fusion_pass, kernel_names
from .schedules import default_rules


@dataclasses.dataclass(frozen=True)
class ScheduleChoice:
    """The schedule of one kernel."""

    kernel: str  # the fused PrimFunc's name
    rule: str  # the rule that takes it: a template's or dlight's class name
    detail: str  # the template's tile in words; empty for dlight's rules

    def __str__(self) -> str:
        return f"{self.kernel}: {self.rule}" + (f": {self.detail}" if self.detail else "")


def explain_schedules(mod: tvm.IRModule, target: tvm.target.Target,
                      fuse_pass: Optional[tvm.transform.Pass] = None,
                      rules: Optional[Sequence] = None) -> List[ScheduleChoice]:
    """The schedule rule (and tile) of every kernel ``main`` of ``mod`` calls, in call order.

    Parameters
    ----------
    mod : tvm.IRModule
        The Relax module, as given to ``tvm.compile``.
    target : tvm.target.Target
        A cuda or rocm target (from :func:`tvm_fusion_hw.hardware.target`).
    fuse_pass : tvm.transform.Pass, optional
        The fusion pass; a fresh ``fusion_pass(target)`` if omitted.
    rules : sequence of ScheduleRule, optional
        The templates tried before dlight's rules, as ``get_pipeline(schedules=...)`` takes them;
        the plugin's defaults if omitted.
    """
    fused = fused_module(mod, target, fuse_pass or fusion_pass(target))
    templates = list(default_rules() if rules is None else rules)
    stock = [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    choices, seen = [], set()
    for name in kernel_names(fused):
        if name in seen:
            continue
        seen.add(name)
        func = fused[name]
        choice = None
        with target:
            for rule in templates:
                if hasattr(rule, "plan"):  # the plugin's templates: the tile and its modelled time
                    planned = rule.plan(func, target)
                    if planned is not None:
                        tile = planned[1]
                        detail = tile.summary() if hasattr(tile, "summary") else str(tile)
                        choice = ScheduleChoice(name, type(rule).__name__, detail)
                        break
                elif rule.apply(func, target, False) is not None:  # any other dlight-style rule
                    choice = ScheduleChoice(name, type(rule).__name__, "")
                    break
            if choice is None:
                taker = next((r for r in stock if r.apply(func, target, False) is not None), None)
                choice = ScheduleChoice(name, f"dlight {type(taker).__name__}" if taker else "none", "")
        choices.append(choice)
    return choices
