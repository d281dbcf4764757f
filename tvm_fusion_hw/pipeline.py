"""Compilation pipelines: TVM's own default pipeline with FuseOps swapped for ours.

:func:`get_pipeline` takes the pass lists of TVM's backend for the target's kind
(``relax/backend/{cuda,rocm,cpu_generic}/pipeline.py``) and replaces the one ``FuseOps`` pass in
them with :class:`HardwareAwareFuseOps` (and dlight's schedule with the guarded templates), so a
comparison with :func:`stock_pipeline` differs in the fusion and schedule decisions, plus two
passes that keep the fused build right: :class:`SafePower` before legalization (``power`` that
CUDA's fast math would make NaN) and :class:`EliminateDeadBlocks` after FuseTIR.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline
from tvm.relax.backend.cuda import pipeline as cuda_pipeline
from tvm.relax.backend.rocm import pipeline as rocm_pipeline

from .errors import FusionHWError
from .fusion.dead_blocks import EliminateDeadBlocks
from .fusion.fuse_pass import HardwareAwareFuseOps
from .fusion.policy import PairRefusal
from .fusion.prologue_rule import GEMM_PROLOGUE
from .guarded_schedule import GuardedSchedule, dlight_rules
from .hardware.profile import HardwareProfile
from .hardware.target import check_target_profile
from .hardware.toolchain import configure_rocm
from .kernel_build import BuildKernels
from .safe_power import SafePower
from .schedules import default_rules, template_planners
from .schedules.gemm.rule import ASYNC_COPY_CONFIG, supports_async_copy
from .split_slices import SplitsIntoSlices
from .winograd_conv import WinogradConv2d

BACKENDS = {"cuda": cuda_pipeline, "rocm": rocm_pipeline, "llvm": cpu_pipeline}


def _backend(target: tvm.target.Target):
    kind = target.kind.name
    if kind not in BACKENDS:
        raise FusionHWError(f"target kind '{kind}' is not supported; use one of {sorted(BACKENDS)}")
    if kind == "rocm":
        configure_rocm()
    return BACKENDS[kind]


def _swap(passes: List[tvm.transform.Pass], name: str, new: tvm.transform.Pass) -> List[tvm.transform.Pass]:
    names = [p.info.name for p in passes]
    if names.count(name) != 1:
        raise FusionHWError(f"expected one {name} in TVM's pipeline, found {names.count(name)}")
    return [new if p.info.name == name else p for p in passes]


def _swap_fuse_ops(passes: List[tvm.transform.Pass], fuse: tvm.transform.Pass) -> List[tvm.transform.Pass]:
    return _swap(passes, "FuseOps", fuse)


def fusion_pass(target_or_profile: Union[tvm.target.Target, HardwareProfile, str], **knobs) -> HardwareAwareFuseOps:
    """:class:`HardwareAwareFuseOps` told what the plugin's schedule templates plan (the pass
    :func:`get_pipeline` uses): put it where ``relax.transform.FuseOps()`` stands, with
    :func:`schedule_pass` where ``dlight.ApplyDefaultSchedule`` stands. ``knobs``: fields of
    :class:`tvm_fusion_hw.PolicyConfig`."""
    return HardwareAwareFuseOps(target_or_profile, planners=template_planners(), **knobs)


def schedule_pass(rules: Optional[Sequence] = None, verify: str = "build") -> GuardedSchedule:
    """dlight's default GPU schedule with ``rules`` (default: this plugin's templates) tried
    first, each template's kernel built alone before it is accepted (``verify``, see
    :class:`~tvm_fusion_hw.guarded_schedule.GuardedSchedule`): a rule that fails on a kernel hands
    it to the next, and dlight's rules come last."""
    return GuardedSchedule(default_rules() if rules is None else rules, dlight_rules(), verify=verify)


def winograd_pass(fuse_pass: tvm.transform.Pass) -> Optional[WinogradConv2d]:
    """The Winograd rewrite ``fuse_pass``'s profile and knobs ask for (None: a pass without a
    profile, e.g. stock FuseOps, or the knob ``winograd="off"``)."""
    profile, config = getattr(fuse_pass, "profile", None), getattr(fuse_pass, "config", None)
    if profile is None or config is None or config.winograd == "off":
        return None
    planners = getattr(fuse_pass, "planners", None)
    return WinogradConv2d(profile, tile=config.winograd_tile, mode=config.winograd,
                          kernel_plan=planners.kernel_estimate if planners is not None else None)


def rewrite_passes(fuse_pass: tvm.transform.Pass) -> List[tvm.transform.Pass]:
    """The graph rewrites ``fuse_pass``'s profile and knobs ask for before legalization, in order:
    the Winograd rewrite (:func:`winograd_pass`), then, with ``layout_prologues``,
    :class:`SplitsIntoSlices` (a split read only by matmuls becomes slices their loads can read).
    Each has ``decisions`` for the fusion report (:func:`report_rewrites`)."""
    config = getattr(fuse_pass, "config", None)
    winograd = winograd_pass(fuse_pass)
    return [*([winograd] if winograd is not None else []),
            *([SplitsIntoSlices()] if getattr(config, "layout_prologues", False) else [])]


def report_rewrites(fuse_pass, rewrites: Sequence) -> None:
    """Put the rewrites' decisions first in ``fuse_pass``'s report (they ran before fusion)."""
    if getattr(fuse_pass, "report", None) is not None:
        fuse_pass.report.decisions[:0] = [d for r in rewrites for d in r.decisions]


def legalize_passes(target: tvm.target.Target, fuse_pass: tvm.transform.Pass,
                    schedules: Union[bool, Sequence, tvm.transform.Pass] = True, verify: str = "build",
                    rewrites: Sequence[tvm.transform.Pass] = ()):
    """TVM's legalization passes for ``target`` with the plugin's fusion (and schedules) in them.

    ``schedules``: True (the plugin's templates), False (dlight's default schedule, as stock), a
    sequence of rules tried before dlight's, or a schedule pass to use as it is. ``rewrites``: graph
    rewrites run first (:func:`rewrite_passes`; their decisions are the caller's to report)."""
    legalize = _swap_fuse_ops(_backend(target).legalize_passes(target), fuse_pass)
    legalize.insert([p.info.name for p in legalize].index("LegalizeOps"), SafePower())
    first = [p.info.name for p in legalize].index("SafePower")
    legalize[first:first] = list(rewrites)
    # Fused epilogues can carry dead outputs (batch_norm's running statistics): drop them before
    # scheduling, or dlight leaves them as host loops over device memory.
    fuse_tir = [p.info.name for p in legalize].index("FuseTIR")
    legalize.insert(fuse_tir + 1, EliminateDeadBlocks())
    if isinstance(schedules, tvm.transform.Pass):
        legalize = _swap(legalize, "ApplyDefaultSchedule", schedules)
    elif schedules is not False and target.kind.name in ("cuda", "rocm"):
        rules = None if schedules is True or schedules is None else list(schedules)
        legalize = _swap(legalize, "ApplyDefaultSchedule", schedule_pass(rules, verify))
    return legalize


def get_pipeline(
    target: tvm.target.Target,
    profile: Union[HardwareProfile, str, None] = None,
    fuse_pass: Optional[HardwareAwareFuseOps] = None,
    schedules: Union[bool, Sequence] = True,
    verify: str = "build",
    build_kernels: bool = True,
    before_build: Sequence[tvm.transform.Pass] = (),
    **knobs,
) -> tvm.transform.Pass:
    """TVM's default pipeline for ``target`` with hardware-aware fusion in place of FuseOps.

    Parameters
    ----------
    target : tvm.target.Target
        Where the code runs: a target from :func:`tvm_fusion_hw.hardware.target` (cuda or rocm), or any
        cuda/rocm/llvm target together with ``profile``.
    profile : HardwareProfile or str, optional
        The hardware to fuse for. Defaults to the profile ``target`` carries. Giving it with an
        llvm target builds the GPU's fusion decisions for the CPU (how the tests check numerics).
    fuse_pass : HardwareAwareFuseOps, optional
        A pass instance to use; made from ``knobs`` (with the schedule templates' planners) if
        omitted. Either way the returned pipeline's ``fuse_pass`` attribute is it, and its
        ``report`` holds the decisions once the pipeline has run.
    schedules : bool or sequence of dlight ScheduleRule
        Try the plugin's schedule templates (``tvm_fusion_hw.schedules``) before dlight's rules on
        GPU targets; a sequence tries those rules instead (e.g. ``[DepthwiseConv()]`` alone).
        False keeps dlight's default schedule: then fusion (and removing the dead blocks it can
        leave, see :mod:`.dead_blocks`, and :class:`SafePower`) is the only difference from
        :func:`stock_pipeline`.
    verify : str
        How a template's kernel is checked before it is accepted (see
        :class:`~tvm_fusion_hw.guarded_schedule.GuardedSchedule`): ``"build"`` (default), ``"device"``
        (also nvcc, where installed) or ``"none"``. A kernel that fails goes to the next rule, and
        a complex pair whose fused kernel its template cannot schedule (or no rule of ``schedules``
        takes) is fused again apart
        (staged). The returned pipeline's ``schedule_pass.log`` lists every such fallback.
    build_kernels : bool
        On GPU targets with the templates, the pipeline's last pass builds the module's kernels
        itself (:class:`~tvm_fusion_hw.kernel_build.BuildKernels`: each template kernel keeps the
        lowering its check made, the rest are lowered on every CPU) and links them to the module as
        an external library, so the module it returns holds no PrimFunc. False leaves them to
        ``tvm.compile`` (for reading the scheduled kernels from the module; and for
        ``tvm.compile(..., system_lib=True)``, which this pass cannot see).
    before_build : sequence of tvm.transform.Pass
        Passes run on the finished module before its kernels are built: they see the scheduled
        PrimFuncs (a register cap per kernel, :mod:`tvm_fusion_hw.bundle.emulation`).
    **knobs
        Keywords of :class:`tvm_fusion_hw.PolicyConfig`, passed to the fusion pass.
    """
    passes = _backend(target)
    if fuse_pass is None:
        fuse_pass = fusion_pass(profile if profile is not None else target, **knobs)
    elif knobs:
        raise FusionHWError("give either fuse_pass or knobs, not both")
    if getattr(fuse_pass, "profile", None) is not None:  # no ROCm profile with a CUDA target, nor the reverse
        check_target_profile(target, fuse_pass.profile)

    guarded = schedules is not False and target.kind.name in ("cuda", "rocm")
    schedule = schedule_pass(None if schedules is True else list(schedules), verify) if guarded else None
    builder = BuildKernels(target, schedule.lowered) if guarded and build_kernels else None

    def run(mod: tvm.IRModule, fuse: HardwareAwareFuseOps) -> tvm.IRModule:
        rewrites = rewrite_passes(fuse)
        with target:
            built = tvm.transform.Sequential(
                passes.library_dispatch_passes(target)
                + legalize_passes(target, fuse, schedule if guarded else schedules, rewrites=rewrites)
                + passes.dataflow_lower_passes(target)
                + passes.finalize_passes(target)
            )(mod)
        report_rewrites(fuse, rewrites)
        return built

    @tvm.transform.module_pass(opt_level=0, name="HardwareAwarePipeline")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        built = run(mod, fuse_pass)
        for _ in range(_MAX_PAIR_RETRIES):  # fuse again without the pairs no template could run
            refused = unscheduled_pairs(fuse_pass.report, schedule) if schedule is not None else ()
            if not refused:
                break
            config = fuse_pass.config
            retry = HardwareAwareFuseOps(fuse_pass.profile, planners=fuse_pass.planners,
                                         plan_memo=getattr(fuse_pass, "plan_memo", None), **{
                **config.__dict__, "refused_pairs": tuple(config.refused_pairs) + tuple(refused)})
            built = run(mod, retry)
            fuse_pass.config, fuse_pass.report = retry.config, retry.report
        built = tvm.transform.Sequential(list(before_build))(built) if before_build else built
        return builder(built) if builder is not None else built

    _pipeline.fuse_pass = fuse_pass  # so that callers read fuse_pass.report after tvm.compile
    _pipeline.schedule_pass = schedule  # its log: the rule of every kernel, every fallback
    _pipeline.build_pass = builder  # the kernels whose check lowering it kept
    return _pipeline


#: Rebuilds a pipeline may make to stage complex pairs whose fused kernel no template scheduled.
_MAX_PAIR_RETRIES = 3


def unscheduled_pairs(report, schedule: GuardedSchedule) -> Tuple[PairRefusal, ...]:
    """The fused complex pairs (attention chains, GEMM prologues) of ``report`` whose kernel no template
    scheduled: a template failed on it (the schedule's log shows the fallback), or none of the
    pipeline's templates took it (a ``schedules=`` list without the pair's template: dlight's rules
    would run the fused kernel untiled). Each as a refusal, the failure its reason."""
    log, templates = schedule.log, {type(r).__name__ for r in schedule.templates}
    reasons = {f.kernel: f"the {f.rule} template failed on the fused kernel {f.kernel} at {f.stage} ({f.error})"
               for f in log.fallbacks if log.rules.get(f.kernel) not in templates}
    for group in report.groups:
        rule = log.rules.get(group.kernel)
        if group.kernel not in reasons and rule is not None and rule not in templates:
            reasons[group.kernel] = f"no schedule template of the pipeline took the fused kernel {group.kernel} " \
                                    f"(dlight's {rule} would run it)"
    refused = []
    for kernel, reason in reasons.items():
        group = next((g for g in report.groups if g.kernel == kernel), None)
        if group is None:
            continue
        ops = set(group.ops)
        for decision in report.decisions:
            fig = decision.figures
            if decision.rule not in ("complex-pair", GEMM_PROLOGUE) or not decision.fused or "producer_ops" not in fig:
                continue
            if set(fig["producer_ops"]) | set(fig["consumer_ops"]) <= ops:
                refused.append(PairRefusal(tuple(fig["producer_ops"]), tuple(fig["consumer_ops"]), reason))
    return tuple(dict.fromkeys(refused))


def pass_context(target: tvm.target.Target) -> tvm.transform.PassContext:
    """The current PassContext with the options the plugin's schedules use on ``target`` added
    (TVM's own switches; nothing is added where none applies)::

        with hw.pass_context(target):
            ex = tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target))

    On CUDA sm_80 and newer: ``tirx.use_async_copy``, so the GEMM template prefetches with
    ``cp.async`` (about 10% faster large GEMMs on an H200), and ``s_tir.LowerAsyncDMA`` disabled:
    that option also runs this DMA lowering (for accelerators with DMA engines), which leaves CUDA
    kernels byte-identical and took more than half of a BERT layer's compile. Without the context every
    template still builds, prefetching through registers.
    """
    if supports_async_copy(target):
        return extended_pass_context(config={ASYNC_COPY_CONFIG: True}, disabled_pass=[_ASYNC_DMA_PASS])
    return extended_pass_context()


def extended_pass_context(config: Optional[dict] = None, disabled_pass: Sequence[str] = (),
                          instruments: Sequence = ()) -> tvm.transform.PassContext:
    """The current PassContext with ``config`` added and ``disabled_pass`` and ``instruments``
    appended; its opt level and every other option kept (so nested contexts of the plugin, e.g.
    :func:`pass_context` around a progress line's pass instrument, do not drop each other's)."""
    now = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=now.opt_level, required_pass=list(now.required_pass),
                                     disabled_pass=list(now.disabled_pass) + list(disabled_pass),
                                     instruments=list(now.instruments) + list(instruments),
                                     config={**dict(now.config), **(config or {})})


#: TVM's DMA lowering, which ``tirx.use_async_copy`` also switches on (``s_tir/pipeline.py``)
_ASYNC_DMA_PASS = "s_tir.LowerAsyncDMA"


def stock_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """TVM's own default pipeline for ``target``: the baseline every comparison uses."""
    _backend(target)
    return relax.get_default_pipeline(target)


def fused_module(
    mod: tvm.IRModule, target: tvm.target.Target, fuse_pass: Optional[tvm.transform.Pass] = None
) -> tvm.IRModule:
    """``mod`` lowered and fused, before scheduling: one PrimFunc per kernel.

    The legalization prefix of TVM's pipeline (LegalizeOps, AnnotateTIROpPattern, FoldConstant),
    then ``fuse_pass`` (stock FuseOps when omitted), then FuseTIR; with ``fuse_pass`` also
    its graph rewrites (Winograd, split slices) and :class:`SafePower` first and EliminateDeadBlocks last, as
    :func:`get_pipeline` runs them.
    """
    rewrites = rewrite_passes(fuse_pass) if fuse_pass is not None else []
    passes = [
        *rewrites,
        *([SafePower()] if fuse_pass is not None else []),  # as get_pipeline does
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        fuse_pass if fuse_pass is not None else relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    if fuse_pass is not None:
        passes.append(EliminateDeadBlocks())  # as get_pipeline does after FuseTIR
    with target:
        fused = tvm.transform.Sequential(passes)(mod)
    report_rewrites(fuse_pass, rewrites)
    return fused


def kernel_names(fused: tvm.IRModule) -> List[str]:
    """The PrimFuncs ``main`` of a fused module calls, in order: one GPU kernel each (or more)."""
    names = []
    for block in fused["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.call_tir")):
                names.append(value.args[0].name_hint)
    return names


def stock_groups(mod: tvm.IRModule, target: tvm.target.Target) -> List[str]:
    """Kernels stock FuseOps makes of ``mod``."""
    return kernel_names(fused_module(mod, target))
