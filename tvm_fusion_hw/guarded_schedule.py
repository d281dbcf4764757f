"""Scheduling that never breaks a build: a failing rule hands its kernel to the next one.

dlight's ``ApplyDefaultSchedule`` calls each rule in turn and lets any exception abort
``tvm.compile``; a schedule that a rule returns is only lowered, pipelined (software pipelining,
``cp.async`` injection) and turned into CUDA or ROCm code much later, for the whole module at
once, where one bad kernel fails them all. :class:`GuardedSchedule` stands where
``ApplyDefaultSchedule`` stands and, per kernel:

1. asks the plugin's templates in order; an exception in ``apply`` (matching, ranking,
   scheduling) is recorded and the next rule is asked;
2. builds the PrimFunc a template scheduled on its own, under the PassContext of the build
   (``tirx.build``: lowering, software pipelining, ``cp.async`` injection, codegen), and with
   ``verify="device"`` also compiles its CUDA source with nvcc, as the runtime would when it
   loads the module; a failure is recorded and the next rule is asked;
3. asks dlight's rules (Matmul, GEMV, Reduction, GeneralReduction, Fallback); one that raises
   (as ``Matmul`` does on squeeze-and-excitation kernels at batch 32, in stock TVM too), or whose
   schedule fails TVM's lowering (``Reduction`` on some grouped convs: "cross-thread reduction
   requires all the reduction-related loops to be the deepest", stock too), hands the kernel to
   the next, so the plugin builds where stock TVM fails. The last, ``Fallback``, takes anything.

Every hand-over is one :class:`Fallback` in :attr:`GuardedSchedule.log` and one warning line.
The mechanism wraps rules from outside, so it holds for any template, written or not yet.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target

from .errors import FusionHWError
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


def build_alone(name: str, func: tirx.PrimFunc, target: Target) -> tvm.runtime.Module:
    """``func`` lowered and turned into device code on its own (raises what the module build
    would, and where a loop nest is bound to no thread)."""
    if stores_outside_threads(func.body):
        raise RuntimeError("a loop nest is bound to no GPU thread: it would run on the host over device memory")
    return tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target=target)


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


def schedule_kernel(name: str, func: tirx.PrimFunc, target: Target, templates: Sequence,
                    fallback_rules: Sequence, verify: str, log: ScheduleLog) -> Optional[tirx.PrimFunc]:
    """``func`` scheduled by the first rule that takes it without failing; None if none takes it.

    ``templates`` are verified by building them alone (see the module docstring);
    ``fallback_rules`` (dlight's) by lowering them alone, all but the last (dlight's Fallback,
    which takes anything); one that raises or fails hands the kernel on. Failures go to ``log``.
    """
    failed: List[Fallback] = []
    chosen, rule_name = None, ""
    last = fallback_rules[-1] if fallback_rules else None
    for rule, verified in [(r, True) for r in templates] + [(r, False) for r in fallback_rules]:
        rule_name = type(rule).__name__
        stage = "schedule"
        try:
            space = rule.apply(func, target, False)
            if space is None:
                continue
            sch = space[0] if isinstance(space, (list, tuple)) else space
            scheduled = sch.mod["main"].with_attr("tirx.is_scheduled", True)
            if verified and verify != "none":
                stage = "build"
                built = build_alone(name, scheduled, target)
                if verify == "device":
                    stage = "device"
                    device_compile(built, target)
            elif verify != "none" and rule is not last:
                stage = "lower"
                lower_alone(name, scheduled, target)
        except Exception as error:  # pylint: disable=broad-except
            # Any failure of a rule or of its kernel's build: never the build's end.
            failed.append(Fallback(name, rule_name, stage, one_line(error)))
            continue
        chosen = scheduled
        break
    taken_by = rule_name if chosen is not None else ""
    for fallback in failed:
        fallback = dataclasses.replace(fallback, taken_by=taken_by)
        log.fallbacks.append(fallback)
        warnings.warn(f"tvm_fusion_hw: {fallback}", TemplateFallbackWarning, stacklevel=2)
    if chosen is not None:
        log.rules[name] = taken_by
    return chosen


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

    After the pass has run, :attr:`log` holds the rule of every kernel and every fallback.
    """

    def __init__(self, templates: Sequence, fallback_rules: Optional[Sequence] = None, verify: str = "build"):
        if verify not in VERIFY_MODES:
            raise FusionHWError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
        self.templates = list(templates)
        self.fallback_rules = dlight_rules() if fallback_rules is None else list(fallback_rules)
        self.verify = verify
        self.log = ScheduleLog()

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self.log = ScheduleLog()
        updated = {}
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
            scheduled = schedule_kernel(gvar.name_hint, func, target, self.templates, self.fallback_rules,
                                        self.verify, self.log)
            if scheduled is not None:
                updated[gvar] = scheduled
        for gvar, func in updated.items():
            mod[gvar] = func
        return mod
