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

What the check costs (it was most of the plugin's compile time over stock's):

* the template kernels of a module are built *together*, one ``tirx.build`` of all of them (per
  target) in as many parts as there are CPUs, side by side on threads (TVM's lowering releases
  the GIL), and only where a part fails is each of its kernels built alone, so that every failure is found and
  reported with its own error, exactly as a build of that kernel alone reports it; a kernel is
  accepted when it built in a module that built. A ROCm build links the device libraries and
  runs ``ld.lld`` once, which made a build per kernel about 1.4x the cost of one build of them all;
* the host side of that build (the packed-function wrapper that launches the kernel) goes through
  TVM's LLVM code generation as in the module's build, at LLVM optimisation level 0 (the wrapper's
  machine code is thrown away): the same TIR passes and the same TIR-to-LLVM translation, without
  LLVM's ``-O3`` pipeline, which was about 40% of a CUDA kernel's check;
* :class:`GuardedSchedule` remembers each kernel's outcome (its schedule, its rule, its
  fallbacks) for the same name, the same IR (:mod:`.fusion.memo`: structurally equal and the same
  TVMScript), target, PassContext and rules: a pipeline that stages a pair schedules the module
  again, and only the kernels that changed are scheduled and built again.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target

from .errors import FusionHWError
from .fusion.memo import ExactIRMemo, target_key
from .hardware.toolchain import configure_rocm, nvcc_path

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


def stores_outside_threads(stmt, bound: bool = False) -> bool:
    """Whether a buffer store of ``stmt`` lies under no loop bound to a GPU thread: that loop nest
    would run on the host over device memory, which builds fine and crashes at run time."""
    if isinstance(stmt, tirx.For):
        return stores_outside_threads(stmt.body, bound or stmt.kind == tirx.ForKind.THREAD_BINDING)
    if isinstance(stmt, tirx.BufferStore):
        return not bound
    if bound:
        return False
    if isinstance(stmt, tirx.SeqStmt):
        return any(stores_outside_threads(s) for s in stmt.seq)
    if isinstance(stmt, s_tir.SBlockRealize):
        return stores_outside_threads(stmt.block)
    if isinstance(stmt, s_tir.SBlock):
        return stores_outside_threads(stmt.body) or (stmt.init is not None and stores_outside_threads(stmt.init))
    if isinstance(stmt, tirx.IfThenElse):
        return stores_outside_threads(stmt.then_case) or (
            stmt.else_case is not None and stores_outside_threads(stmt.else_case))
    stores: list = []
    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, stores.append)], order="post")
    return bool(stores)


def verify_host(target: Target) -> Target:
    """The host target a kernel is checked with: the build's host (llvm unless ``target`` names
    one) at LLVM optimisation level 0. The host code is what TVM's LLVM code generator makes of
    the module's host functions (argument checks, the kernel launch), the same as in the module's
    build; only LLVM's optimisation passes over it are skipped, and its machine code is not kept."""
    host = target.host if target.host is not None else Target("llvm" if tvm.runtime.enabled("llvm") else "c")
    if host.kind.name != "llvm":
        return host
    return Target({**dict(host.export()), "opt-level": 0})


def build_together(funcs: Dict[str, tirx.PrimFunc], target: Target) -> tvm.runtime.Module:
    """``funcs`` (name -> scheduled PrimFunc) lowered and turned into device code as one module,
    apart from the rest of the model (raises what the module build would, and where a loop nest
    of one of them is bound to no thread). The host side is generated at LLVM's ``-O0``
    (:func:`verify_host`); a CPU target is built as it is."""
    for name, func in funcs.items():
        if stores_outside_threads(func.body):
            raise RuntimeError("a loop nest is bound to no GPU thread: it would run on the host over device "
                               "memory" + ("" if len(funcs) == 1 else f" ({name})"))
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name) for name, func in funcs.items()})
    if target.get_target_device_type() == tvm_ffi.DLDeviceType.kDLCPU:
        return tvm.tirx.build(mod, target=target)
    return tvm.tirx.build(mod, target=Target(target, verify_host(target)))


def build_alone(name: str, func: tirx.PrimFunc, target: Target) -> tvm.runtime.Module:
    """``func`` lowered and turned into device code on its own (raises what the module build
    would, and where a loop nest is bound to no thread); see :func:`build_together`."""
    return build_together({name: func}, target)


def _check(funcs: Dict[str, tirx.PrimFunc], target: Target, verify: str) -> Optional[Tuple[str, Exception]]:
    """None when ``funcs`` build together (and, with ``verify="device"``, their CUDA compiles);
    else the stage that failed and its error."""
    stage = "build"
    try:
        built = build_together(funcs, target)
        if verify == "device":
            stage = "device"
            device_compile(built, target)
    except Exception as error:  # pylint: disable=broad-except
        return stage, error
    return None


def verify_kernels(kernels: Sequence[Tuple[str, tirx.PrimFunc]], target: Target,
                   verify: str = "build") -> Dict[str, Tuple[str, Exception]]:
    """The kernels of ``kernels`` ((name, scheduled PrimFunc) pairs, one target) that fail to
    build alone, each with its stage (``"build"`` or ``"device"``) and error.

    They are built together in as many parts as there are CPUs to build them on (:func:`in_parallel`);
    only where a part fails is each of its kernels built alone, so that a failure is the one a build
    of that kernel alone raises, and a kernel is accepted when it built in a module that built.
    Names that repeat are built alone. Nothing is built with ``verify="none"``.
    """
    if verify == "none" or not kernels:
        return {}
    names = [name for name, _ in kernels]
    parts = [[k] for k in kernels] if len(set(names)) < len(names) else _parts(list(kernels), _build_workers())

    def check(part):
        return _check(dict(part), target, verify)

    failed = dict(zip(map(id, parts), in_parallel(check, parts)))
    singles = [[k] for part in parts if failed[id(part)] is not None and len(part) > 1 for k in part]
    failed.update(zip(map(id, singles), in_parallel(check, singles)))
    failures = {part[0][0]: failed[id(part)] for part in parts + singles
                if len(part) == 1 and failed[id(part)] is not None}
    return {name: failures[name] for name in names if name in failures}


def _build_workers() -> int:
    """CPUs this process may run on (TVM's lowering releases the GIL: builds run side by side)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _parts(items: list, count: int) -> List[list]:
    """``items`` dealt into at most ``count`` non-empty parts."""
    count = max(1, min(count, len(items)))
    return [items[i::count] for i in range(count)]


def in_parallel(fn, items: Sequence) -> list:
    """``[fn(item) for item in items]`` on up to one thread per CPU, every thread under a copy of the
    caller's PassContext (its options; not its instruments, which are not made for two threads at
    once)."""
    workers = min(len(items), _build_workers())
    if workers <= 1:
        return [fn(item) for item in items]
    ctx = tvm.transform.PassContext.current()

    def run(item):
        with tvm.transform.PassContext(opt_level=ctx.opt_level, required_pass=list(ctx.required_pass),
                                       disabled_pass=list(ctx.disabled_pass), config=dict(ctx.config)):
            return fn(item)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, items))


def lower_alone(name: str, func: tirx.PrimFunc, target: Target) -> None:
    """``func`` through TVM's TIR lowering alone, no code generation: where dlight's schedules
    fail (a cross-thread reduction whose loops are not the deepest) they fail here, for a
    fraction of a build."""
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name)})
    host = target.host if target.host is not None else Target({"kind": "llvm"})
    mod = tvm.tirx.transform.BindTarget(Target(target, host))(mod)
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    pipeline(mod)


def device_compile(built: tvm.runtime.Module, target: Target) -> None:
    """Compile a built kernel's CUDA source with nvcc, as the runtime compiles it at load time
    (nothing where nvcc or CUDA source is absent)."""
    nvcc = nvcc_path()
    sources = [str(m.inspect_source("")) for m in built.imports if m.kind == "cuda"]
    if nvcc is None or target.kind.name != "cuda" or not sources:
        return
    arch = str(target.attrs.get("arch", "sm_80"))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text("".join(sources))
        done = subprocess.run([nvcc, "--cubin", f"-arch={arch}", "-O3", "-o", str(Path(tmp) / "kernel.cubin"),
                               str(src)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if "error" in ln] or ["nvcc failed"]
        raise RuntimeError(f"nvcc: {lines[0].strip()}")


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
                     memo: Optional[ExactIRMemo] = None) -> Dict[str, tirx.PrimFunc]:
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
    target, PassContext, rules and ``verify``.
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
            failures = verify_kernels([(st.name, st.candidate) for st in group], group[0].target, verify)
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
    stages a pair runs it again): see the module docstring.
    """

    def __init__(self, templates: Sequence, fallback_rules: Optional[Sequence] = None, verify: str = "build"):
        if verify not in VERIFY_MODES:
            raise FusionHWError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
        self.templates = list(templates)
        self.fallback_rules = dlight_rules() if fallback_rules is None else list(fallback_rules)
        self.verify = verify
        self.log = ScheduleLog()
        self.memo = ExactIRMemo()

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
        scheduled = schedule_kernels([(gvar.name_hint, func, target) for gvar, func, target in kernels],
                                     self.templates, self.fallback_rules, self.verify, self.log, self.memo)
        for gvar, _, _ in kernels:
            if gvar.name_hint in scheduled:
                mod[gvar] = scheduled[gvar.name_hint]
        return mod
