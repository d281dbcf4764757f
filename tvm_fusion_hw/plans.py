"""What a schedule template plans for a kernel, in the figures a fusion policy checks.

A fusion policy decides before any kernel exists; the templates decide the kernel. So that the two
agree, the policy asks the templates for their plans instead of modelling the kernels itself. This
module is the protocol between them, and imports neither: the pipeline builds a
:class:`TemplatePlanners` from the schedule templates (``tvm_fusion_hw.schedules.template_planners``)
and hands it to the fusion pass.

* a **pair template** (an entry of :attr:`TemplatePlanners.pairs`, keyed ``"producer
  kind->consumer kind"``) is asked about the two PrimFuncs of a complex pair before fusion. An entry
  is either a plain check ``check(producer, consumer) -> bool`` (it takes the pair or not; the
  policy's own tile model then judges the fit) or a planner ``plan(producer, consumer, target) ->
  plan | None`` (a callable with a third positional parameter, or one named ``target``): the plan
  the template would run the fused pair with on ``target``, None when it cannot run the pair;
* :attr:`TemplatePlanners.kernel_plan` asks the tiled rules about one PrimFunc alone (a part of a
  pair left unfused), so that the policy compares the fused plan with the unfused parts' plans.

A plan is a :class:`KernelPlan`, or any tile of a rule (an object with ``threads``,
``registers_estimate`` and ``shared_bytes``), which :func:`as_plan` turns into one.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Tuple

from tvm import tirx
from tvm.target import Target


@dataclasses.dataclass(frozen=True)
class KernelPlan:
    """One kernel as a template plans it: what a block of it holds on the multiprocessor."""

    template: str  # the rule's name ("ConvPool")
    threads_per_block: int
    registers_per_thread: int  # the template's estimate (NVIDIA registers, AMD VGPRs)
    shared_bytes: int  # shared memory (LDS) per block
    blocks: int = 0  # blocks of the launch (0: not planned)
    summary: str = ""  # the tile in words
    #: the template's modelled time (0: not modelled); ``compute_s`` the same without its DRAM
    #: floor and ``dram_s`` the floor (0: not separated), so that a policy can weigh the bytes a
    #: plan moves against the work it does on another profile's roofline
    time_s: float = 0.0
    compute_s: float = 0.0
    dram_s: float = 0.0
    #: times the fused kernel computes each intermediate value (1: never recomputed)
    recompute: int = 1

    def describe(self) -> str:
        """The plan's figures in a few words, for a decision's reason."""
        return (f"{self.threads_per_block} threads/block, ~{self.registers_per_thread} regs/thread, "
                f"{self.shared_bytes / 1024:.1f} KiB shared/block")


def as_plan(answer: object, template: str = "") -> Optional[KernelPlan]:
    """``answer`` as a :class:`KernelPlan`: itself, or made from a rule's tile; None for
    anything else (a bool, None)."""
    if isinstance(answer, KernelPlan):
        return answer
    if isinstance(answer, bool) or answer is None:
        return None
    try:
        threads = int(getattr(answer, "threads"))
        registers = int(getattr(answer, "registers_estimate"))
        shared = int(getattr(answer, "shared_bytes"))
    except (AttributeError, TypeError, ValueError):
        return None
    summary = answer.summary() if callable(getattr(answer, "summary", None)) else ""
    figures = {name: _number(answer, name, 0.0) for name in ("time_s", "compute_s", "dram_s")}
    return KernelPlan(template or type(answer).__name__, threads, registers, shared,
                      int(getattr(answer, "blocks", 0) or 0), summary,
                      recompute=max(1, int(_number(answer, "recompute", 1))), **figures)


def _number(answer: object, name: str, default: float) -> float:
    """A tile's optional figure ``name``; ``default`` where it has none (or not a number)."""
    try:
        value = float(getattr(answer, name, default))
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) and value >= 0 else default  # NaN, inf or negative: none


def plans_with_target(entry: Callable) -> bool:
    """Whether an entry of :attr:`TemplatePlanners.pairs` is a planner (takes the target as a third argument)."""
    try:
        params = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: a plain check
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.name == "target" for p in params) or len(positional) >= 3 or any(
        p.kind == p.VAR_POSITIONAL for p in params)


def ask_pair_template(entry: Callable, producer: tirx.PrimFunc, consumer: tirx.PrimFunc,
                      target: Target) -> Tuple[bool, Optional[KernelPlan], bool]:
    """Ask an entry of :attr:`TemplatePlanners.pairs` about a pair: ``(takes, plan, planner)``.

    ``planner`` says whether the entry answered as a planner: with a plan, or with None when the
    template cannot run the pair. A check's True or False gives ``(answer, None, False)``, and
    the policy's own tile model judges the fit.
    """
    planner = plans_with_target(entry)
    answer = entry(producer, consumer, target) if planner else entry(producer, consumer)
    plan = as_plan(answer)
    if plan is not None:
        return True, plan, True
    if planner and answer is None:
        return False, None, True
    return bool(answer), None, False  # a check's answer (a planner that answered True or False too)


def _no_kernel_plan(_func: tirx.PrimFunc, _target: Target) -> Optional[KernelPlan]:
    return None


@dataclasses.dataclass(frozen=True)
class TemplatePlanners:
    """What the schedule templates tell the fusion policy, handed to it by the pipeline.

    Attributes
    ----------
    pairs : Mapping[str, Callable]
        ``"producer kind->consumer kind"`` -> a check or a planner (see the module docstring): the
        complex pairs a template can run as one kernel.
    fused_by_default : tuple of str
        The pairs of ``pairs`` the policy fuses unless its ``pair_templates`` knob names others.
    kernel_plan : Callable
        ``(func, target) -> KernelPlan | None``: how the templates would run one PrimFunc alone.
    kernel_estimate : Callable, optional
        The same question answered from the templates' tile ranking alone, without scheduling the
        PrimFunc (for a cost model's kernels that are not built as they are); ``kernel_plan`` where
        omitted.
    chains : Mapping[str, Callable]
        ``"first kind->middle kind->last kind"`` -> a planner ``plan(first, middle, last, target)
        -> plan | None`` of three complex ops run as one kernel (attention: ``matmul->reduce->matmul``);
        the policy considers those of them ``fused_by_default`` (or its ``pair_templates`` knob) names.
    prologues : Mapping[str, Callable]
        A contraction's kind (``"pointwise_conv"``) -> a planner ``plan(producers, consumer,
        operand, target) -> plan | None``: the plan of the contraction's PrimFunc ``consumer`` with
        the element-wise PrimFuncs ``producers`` of its argument ``operand`` computed inside its
        loads (a prologue), None where the template cannot run it.
    """

    pairs: Mapping[str, Callable] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    fused_by_default: Tuple[str, ...] = ()
    kernel_plan: Callable[[tirx.PrimFunc, Target], Optional[KernelPlan]] = _no_kernel_plan
    chains: Mapping[str, Callable] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    prologues: Mapping[str, Callable] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    kernel_estimate: Optional[Callable[[tirx.PrimFunc, Target], Optional[KernelPlan]]] = None

    def __post_init__(self):
        if self.kernel_estimate is None:
            object.__setattr__(self, "kernel_estimate", self.kernel_plan)
        object.__setattr__(self, "pairs", MappingProxyType(dict(self.pairs)))
        object.__setattr__(self, "chains", MappingProxyType(dict(self.chains)))
        object.__setattr__(self, "prologues", MappingProxyType(dict(self.prologues)))
        object.__setattr__(self, "fused_by_default", tuple(self.fused_by_default))


#: No schedule templates: no complex pair fuses (what stock FuseOps does), every part is estimated.
NO_TEMPLATES = TemplatePlanners()
