"""Scheduling that never breaks a build: a failing rule hands its kernel to the next one.

dlight's ``ApplyDefaultSchedule`` calls each rule in turn and lets any exception abort
``tvm.compile``; a schedule that a rule returns is only lowered, pipelined (software pipelining,
``cp.async`` injection) and turned into CUDA or ROCm code much later, for the whole module at
once, where one bad kernel fails them all. :class:`GuardedSchedule` stands where
``ApplyDefaultSchedule`` stands and, per kernel:

1. asks the plugin's templates in order; an exception in ``apply`` (matching, ranking,
   scheduling) is recorded and the next rule is asked;
2. builds the PrimFunc a template scheduled apart from the module, under the PassContext of the
   build (``tirx.build``: lowering, software pipelining, ``cp.async`` injection, device and host
   codegen), and with ``verify="device"`` also compiles its CUDA source with nvcc, as the runtime
   would when it loads the module; a failure is recorded and the next rule is asked;
3. asks dlight's rules (Matmul, GEMV, Reduction, GeneralReduction, Fallback); one that raises
   (as ``Matmul`` does on squeeze-and-excitation kernels at batch 32, in stock TVM too), or whose
   schedule fails TVM's lowering (``Reduction`` on some grouped convs: "cross-thread reduction
   requires all the reduction-related loops to be the deepest", stock too), hands the kernel to
   the next, so the plugin builds where stock TVM fails. The last, ``Fallback``, takes anything.

Every hand-over is one :class:`Fallback` in :attr:`GuardedSchedule.log` and one warning line.
The mechanism wraps rules from outside, so it holds for any template, written or not yet.

What the check costs (it was most of the plugin's compile time over stock's) is kept down in
:mod:`.kernel_check` (kernels built together, in one part per CPU, the host side at LLVM
``-O0``), and here: :class:`GuardedSchedule` remembers each kernel's outcome (its schedule, its
rule, its fallbacks) for the same name, the same IR (:mod:`.fusion.memo`: structurally equal and
the same TVMScript), target, PassContext and rules: a pipeline that stages a pair schedules the
module again, and only the kernels that changed are scheduled and built again.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import tvm
from tvm import tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target

from .errors import FusionHWError
from .fusion.memo import ExactIRMemo, target_key
from .hardware.toolchain import configure_rocm
from .kernel_build import LoweredStore
from .kernel_check import lower_alone, verify_kernels
from .schedules.base.unchecked import unchecked_schedule_calls

#: How much of a template's kernel is built before it is accepted.
VERIFY_MODES = ("build", "device", "none")


class TemplateFallbackWarning(UserWarning):
    """A schedule rule failed on a kernel and the next rule took it."""


@dataclasses.dataclass(frozen=True)
class Fallback:
    """One rule that failed on one kernel."""

    kernel: str  # the PrimFunc's name
    rule: str  # the rule that failed
    stage: str  # "schedule" (the rule raised), "build" (lowering/codegen), "device" (nvcc)
    error: str  # the error, one line
    taken_by: str = ""  # the rule that scheduled the kernel in the end

    def __str__(self) -> str:
        return f"{self.kernel}: {self.rule} failed at {self.stage} ({self.error}); {self.taken_by or 'no rule'} took it"


@dataclasses.dataclass
class ScheduleLog:
    """What :class:`GuardedSchedule` did: the rule of each kernel, and every fallback."""

    rules: Dict[str, str] = dataclasses.field(default_factory=dict)  # kernel -> the rule that took it
    #: kernel -> the taking template's plan in words (its tile's ``summary()``); none for dlight's
    plans: Dict[str, str] = dataclasses.field(default_factory=dict)
    fallbacks: List[Fallback] = dataclasses.field(default_factory=list)

    def fallbacks_of(self, kernel: str) -> List[Fallback]:
        return [f for f in self.fallbacks if f.kernel == kernel]


def one_line(error: BaseException, limit: int = 240) -> str:
    """The informative line of an exception (TVM's carry a traceback before the message)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if re.search(r"(Error|Check failed|error:)", ln)), lines[-1] if lines else "")
    text = f"{type(error).__name__}: {pick}" if pick and type(error).__name__ not in pick else (pick or type(error).__name__)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dlight_rules() -> List[dl.ScheduleRule]:
    """dlight's default GPU rules, in the order TVM's CUDA and ROCm pipelines apply them."""
    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def _is_scheduled(func: tirx.PrimFunc) -> bool:
    return "tirx.is_scheduled" in func.attrs and int(func.attrs["tirx.is_scheduled"]) == 1


class _Kernel:
    """One kernel on its way through the rules: the next template to ask, what failed so far."""

    def __init__(self, name: str, func: tirx.PrimFunc, target: Target):
        self.name, self.func, self.target = name, func, target
        self.position = 0  # the next template to ask
        self.failed: List[Fallback] = []
        self.candidate: Optional[tirx.PrimFunc] = None  # a template's schedule, to be built
        self.candidate_plan = ""  # its tile in words
        self.plan = ""  # the chosen schedule's
        self.rule_name = ""  # the rule asked last (the one that took the kernel, once done)
        self.chosen: Optional[tirx.PrimFunc] = None
        self.done = False

    def next_template(self, templates: Sequence) -> bool:
        """Ask the templates from :attr:`position` on until one returns a schedule (it becomes the
        :attr:`candidate`: True); one that raises is a failure at "schedule". False: none left."""
        while self.position < len(templates):
            rule = templates[self.position]
            self.position += 1
            self.rule_name = type(rule).__name__
            try:
                scheduled, plan = _apply(rule, self.func, self.target)
            except Exception as error:  # pylint: disable=broad-except
                # Any failure of a rule: never the build's end.
                self.failed.append(Fallback(self.name, self.rule_name, "schedule", one_line(error)))
                continue
            if scheduled is not None:
                self.candidate, self.candidate_plan = scheduled, plan
                return True
        self.candidate = None
        return False

    def accept(self, func: tirx.PrimFunc, plan: str = "") -> None:
        self.chosen, self.plan, self.candidate, self.done = func, plan, None, True

    def fallback_rules(self, rules: Sequence, verify: str) -> None:
        """dlight's rules in turn, each schedule but the last rule's lowered alone (as before any
        batching: they are few, and cheap to lower)."""
        last = rules[-1] if rules else None
        for rule in rules:
            self.rule_name = type(rule).__name__
            stage = "schedule"
            try:
                scheduled, _ = _apply(rule, self.func, self.target)
                if scheduled is None:
                    continue
                if verify != "none" and rule is not last:
                    stage = "lower"
                    lower_alone(self.name, scheduled, self.target)
            except Exception as error:  # pylint: disable=broad-except
                self.failed.append(Fallback(self.name, self.rule_name, stage, one_line(error)))
                continue
            self.accept(scheduled)
            return
        self.done = True


def _apply(rule, func: tirx.PrimFunc, target: Target) -> Tuple[Optional[tirx.PrimFunc], str]:
    """``rule``'s schedule of ``func`` (marked scheduled; None when it does not take it) and, for a
    template, its tile in words (a dlight rule has none: "")."""
    space = rule.apply(func, target, False)
    if space is None:
        return None, ""
    sch = space[0] if isinstance(space, (list, tuple)) else space
    return sch.mod["main"].with_attr("tirx.is_scheduled", True), _plan_words(rule, func)


def _plan_words(rule, func: tirx.PrimFunc) -> str:
    """The tile ``rule`` chose for ``func`` in words, for the log; "" where it has none (or its
    summary fails: a report never decides which rule takes a kernel)."""
    tile = rule.planned_tile(func) if hasattr(rule, "planned_tile") else None
    try:
        return "" if tile is None else (tile.summary() if hasattr(tile, "summary") else str(tile))
    except Exception:  # pylint: disable=broad-except
        return ""


def schedule_kernels(kernels: Sequence[Tuple[str, tirx.PrimFunc, Target]], templates: Sequence,
                     fallback_rules: Sequence, verify: str, log: ScheduleLog,
                     memo: Optional[ExactIRMemo] = None,
                     store: Optional[LoweredStore] = None) -> Dict[str, tirx.PrimFunc]:
    """Each of ``kernels`` ((name, PrimFunc, target) triples) scheduled by the first rule that takes
    it without failing: name -> scheduled PrimFunc (a kernel no rule takes is left out).

    ``templates`` are verified by building their kernels (see the module docstring): in rounds, each
    round asking every kernel not yet taken for its next template's schedule and building that
    round's schedules together per target (:func:`verify_kernels`); a kernel whose schedule fails
    goes on to its next template in the next round. ``fallback_rules`` (dlight's) come after, kernel
    by kernel, each schedule but the last rule's lowered alone (:func:`lower_alone`). A rule that
    raises or fails hands the kernel on. Failures go to ``log`` (and one warning each), kernel by
    kernel in the order given, as if each kernel had been scheduled alone.

    ``memo`` (optional) remembers each kernel's outcome and gives it back for the same name, IR,
    target, PassContext, rules and ``verify``; ``store`` (optional) keeps the lowering of every
    template kernel that was built (:class:`.kernel_build.LoweredStore`).
    """
    states = [_Kernel(name, func, target) for name, func, target in kernels]
    rules_key = (tuple(map(id, templates)), tuple(map(id, fallback_rules)), verify)
    remembered = {}
    if memo is not None:
        for st in states:
            found, outcome = memo.lookup((st.name, target_key(st.target), rules_key), (st.func,))
            if found:
                remembered[id(st)] = outcome
                st.done = True
    while True:
        batch = [st for st in states if not st.done and st.next_template(templates)]
        if not batch:
            break
        by_target: Dict[str, List[_Kernel]] = {}
        for st in batch:
            by_target.setdefault(target_key(st.target), []).append(st)
        for group in by_target.values():
            failures = verify_kernels([(st.name, st.candidate) for st in group], group[0].target, verify, store)
            for st in group:
                if st.name in failures:
                    stage, error = failures[st.name]
                    st.failed.append(Fallback(st.name, st.rule_name, stage, one_line(error)))
                    st.candidate = None
                else:
                    st.accept(st.candidate, st.candidate_plan)
    for st in states:
        if not st.done:
            st.fallback_rules(fallback_rules, verify)
    scheduled = {}
    for st in states:
        if id(st) in remembered:
            chosen, taken_by, failed, plan = remembered[id(st)]
        else:
            taken_by = st.rule_name if st.chosen is not None else ""
            chosen, failed = st.chosen, tuple(dataclasses.replace(f, taken_by=taken_by) for f in st.failed)
            plan = st.plan
            if memo is not None:
                memo.store((st.name, target_key(st.target), rules_key), (st.func,), (chosen, taken_by, failed, plan))
        for fallback in failed:
            log.fallbacks.append(fallback)
            warnings.warn(f"tvm_fusion_hw: {fallback}", TemplateFallbackWarning, stacklevel=2)
        if chosen is not None:
            log.rules[st.name] = taken_by
            if plan:
                log.plans[st.name] = plan
            scheduled[st.name] = chosen
    return scheduled


def schedule_kernel(name: str, func: tirx.PrimFunc, target: Target, templates: Sequence,
                    fallback_rules: Sequence, verify: str, log: ScheduleLog) -> Optional[tirx.PrimFunc]:
    """``func`` scheduled by the first rule that takes it without failing; None if none takes it
    (:func:`schedule_kernels` for one kernel: templates verified by building the kernel alone,
    dlight's rules but the last by lowering it alone). Failures go to ``log``."""
    return schedule_kernels([(name, func, target)], templates, fallback_rules, verify, log).get(name)


@tvm.transform.module_pass(opt_level=0, name="GuardedSchedule")
class GuardedSchedule:
    """Schedule every unscheduled PrimFunc: ``templates`` first (verified), then dlight's rules.

    Parameters
    ----------
    templates : sequence of ScheduleRule
        The plugin's templates (or any dlight-style rules), tried in order.
    fallback_rules : sequence of ScheduleRule, optional
        Tried after them; dlight's default GPU rules if omitted.
    verify : str
        ``"build"`` (default): build each template's kernel alone before accepting it;
        ``"device"``: also compile its CUDA source with nvcc where nvcc is installed;
        ``"none"``: accept what a template returns (a failure in the module's build then fails it).

    After the pass has run, :attr:`log` holds the rule of every kernel and every fallback. The
    template kernels of a module are built together (each alone only when that fails), and
    :attr:`memo` remembers every kernel's outcome for the next run of this pass (a pipeline that
    stages a pair runs it again): see the module docstring. :attr:`lowered` keeps the check's
    lowering of each template kernel, which the pipeline's own build of the module reuses
    (:class:`.kernel_build.BuildKernels`).
    """

    def __init__(self, templates: Sequence, fallback_rules: Optional[Sequence] = None, verify: str = "build"):
        if verify not in VERIFY_MODES:
            raise FusionHWError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
        self.templates = list(templates)
        self.fallback_rules = dlight_rules() if fallback_rules is None else list(fallback_rules)
        self.verify = verify
        self.log = ScheduleLog()
        self.memo = ExactIRMemo()
        self.lowered = LoweredStore()

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self.log = ScheduleLog()
        kernels = []
        configured = False
        for gvar, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or _is_scheduled(func):
                continue
            target = func.attrs.get("target") if "target" in func.attrs else Target.current(allow_none=False)
            if target.kind.name == "rocm" and not configured and self.verify != "none":
                # The kernels are built alone: without the toolchain that build fails for every
                # template alike, which says nothing about them (a missing one: a clear error).
                configure_rocm()
                configured = True
            kernels.append((gvar, func, target))
        with unchecked_schedule_calls():  # dlight's rules too: TVM's argument checks, once per pass
            scheduled = schedule_kernels([(gvar.name_hint, func, target) for gvar, func, target in kernels],
                                         self.templates, self.fallback_rules, self.verify, self.log, self.memo,
                                         self.lowered)
        for gvar, _, _ in kernels:
            if gvar.name_hint in scheduled:
                mod[gvar] = scheduled[gvar.name_hint]
        return mod
