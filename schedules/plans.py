"""What a schedule template plans for a kernel, in the figures a fusion policy checks.

A fusion policy decides before any kernel exists; the templates here decide the kernel. So that
the two agree, the policy asks the templates for their plans instead of modelling the kernels
itself:

* a **pair template** (``PAIR_TEMPLATES`` in this package, keyed ``"producer kind->consumer
  kind"``) is asked about the two PrimFuncs of a complex pair before fusion. An entry is either a
  plain check ``check(producer, consumer) -> bool`` (it takes the pair or not; the policy's own
  tile model then judges the fit) or a planner ``plan(producer, consumer, target) -> plan | None``
  (a callable with a third positional parameter, or one named ``target``): the plan the template
  would run the fused pair with on ``target``, None when it cannot run the pair at all;
* :func:`kernel_plan` asks the package's tiled rules about one PrimFunc alone (a part of a pair
  left unfused), so that the policy compares the fused plan with the unfused parts' plans.

A plan is a :class:`KernelPlan`, or any tile of a rule here (an object with ``threads``,
``registers_estimate`` and ``shared_bytes``), which :func:`as_plan` turns into one.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Optional, Sequence, Tuple

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
    return KernelPlan(template or type(answer).__name__, threads, registers, shared,
                      int(getattr(answer, "blocks", 0) or 0), summary)


def plans_with_target(entry: Callable) -> bool:
    """Whether a ``PAIR_TEMPLATES`` entry is a planner (takes the target as a third argument)."""
    try:
        params = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: a plain check
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.name == "target" for p in params) or len(positional) >= 3 or any(
        p.kind == p.VAR_POSITIONAL for p in params)


def ask_pair_template(entry: Callable, producer: tirx.PrimFunc, consumer: tirx.PrimFunc,
                      target: Target) -> Tuple[bool, Optional[KernelPlan], bool]:
    """Ask a ``PAIR_TEMPLATES`` entry about a pair: ``(takes, plan, planner)``.

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


def kernel_plan(func: Optional[tirx.PrimFunc], target: Target,
                rules: Optional[Sequence] = None) -> Optional[KernelPlan]:
    """The plan of the first of ``rules`` (default: the package's) that takes ``func`` alone, as
    ``get_pipeline`` would schedule it; None when no tiled rule takes it (dlight would)."""
    if not isinstance(func, tirx.PrimFunc):
        return None
    if rules is None:
        from . import default_rules  # pylint: disable=import-outside-toplevel

        rules = default_rules()
    for rule in rules:
        if not callable(getattr(rule, "plan", None)):
            continue
        try:
            planned = rule.plan(func, target)
        except Exception:  # pylint: disable=broad-except
            # A rule that fails to plan a part leaves it to the next rule (or to the policy's
            # estimate); the pipeline would move on to the next rule as well.
            continue
        if planned is not None:
            return as_plan(planned[1], type(rule).__name__)
    return None
