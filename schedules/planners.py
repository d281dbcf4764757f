"""The schedule templates' side of the fusion protocol (:mod:`tvm_fusion_hw.plans`).

:func:`template_planners` is what the pipeline hands the fusion pass: which complex pairs a
template here runs as one kernel, and how the tiled rules would run one PrimFunc alone.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Optional, Sequence

from tvm import tirx
from tvm.target import Target

from tvm_fusion_hw.plans import KernelPlan, TemplatePlanners, as_plan

from .attention.rule import chain_plan as attention_chain_plan
from .conv_pool.rule import pair_plan as conv_pool_pair_plan
from .dw_pw.rule import pair_plan as dw_pw_pair_plan
from .gemm.rule import prologue_plan as gemm_prologue_plan
from .rules import default_rules

#: Complex pairs ("producer kind->consumer kind") that a template here runs as one kernel, each
#: with what the fusion policy asks before fusing (on the two PrimFuncs, unfused): a planner that
#: answers with the fused kernel's plan (threads, registers, shared memory, modelled time). Without
#: a template dlight would write the intermediate to a global workspace and lose the tiled schedule.
PAIR_TEMPLATES = MappingProxyType({
    "conv->window": conv_pool_pair_plan,
    "pointwise_conv->window": conv_pool_pair_plan,
    "depthwise_conv->pointwise_conv": lambda producer, consumer, target: as_plan(
        dw_pw_pair_plan(producer, consumer, target), "DepthwisePointwise"),
})
#: Chains of three complex ops ("first->middle->last") a template here runs as one kernel, with
#: the planner the fusion policy asks (on the three PrimFuncs, unfused): attention's scores, softmax
#: and ``. V``, fused where every key and value of a head fits the profile's shared memory.
CHAIN_TEMPLATES = MappingProxyType({
    "matmul->reduce->matmul": attention_chain_plan,
})
#: Contractions (by kind) whose template computes element-wise producers of an operand inside its
#: loads (a prologue: an SE block's channel scale in the projecting conv's loads), with the planner
#: the fusion policy asks (on the unfused PrimFuncs). A depthwise conv is not here: its template
#: stages a halo tile whose loads a prologue would repeat.
PROLOGUE_TEMPLATES = MappingProxyType({
    "conv": gemm_prologue_plan,
    "pointwise_conv": gemm_prologue_plan,
    "matmul": gemm_prologue_plan,
})
#: The pairs (and chains) the policy considers by default; its ``pair_templates`` knob names others. Each still
#: has to fit the profile, and a pair whose template's model was measured (depthwise_conv->pointwise_conv,
#: conv->window) also to beat the two kernels apart on the profile's roofline (fusion/pair_cost.py:
#: the fused depthwise->pointwise kernel measured slower than the two apart on the H200,
#: bench/results/2026-11-30-h200-dw-pw, so it fuses only where bandwidth is short).
FUSED_PAIR_TEMPLATES = ("conv->window", "pointwise_conv->window", "depthwise_conv->pointwise_conv",
                        "matmul->reduce->matmul")


def kernel_plan(func: Optional[tirx.PrimFunc], target: Target,
                rules: Optional[Sequence] = None) -> Optional[KernelPlan]:
    """The plan of the first of ``rules`` (default: the package's) that takes ``func`` alone, as
    ``get_pipeline`` would schedule it; None when no tiled rule takes it (dlight would)."""
    return _first_plan(func, target, rules, "plan")


def kernel_estimate(func: Optional[tirx.PrimFunc], target: Target,
                    rules: Optional[Sequence] = None) -> Optional[KernelPlan]:
    """:func:`kernel_plan` from the rules' tile ranking alone (each rule's ``estimate``: its best
    ranked tile, neither scheduled nor checked), for kernels a cost model compares and that are
    not built as they are; a rule without ``estimate`` plans."""
    return _first_plan(func, target, rules, "estimate")


def _first_plan(func, target: Target, rules: Optional[Sequence], method: str) -> Optional[KernelPlan]:
    if not isinstance(func, tirx.PrimFunc):
        return None
    for rule in default_rules() if rules is None else rules:
        ask = getattr(rule, method, None) or getattr(rule, "plan", None)
        if not callable(ask):
            continue
        try:
            planned = ask(func, target)
        except Exception:  # pylint: disable=broad-except
            # A rule that fails to plan a part leaves it to the next rule (or to the policy's
            # estimate); the pipeline would move on to the next rule as well.
            continue
        if planned is not None:
            return as_plan(planned[1], type(rule).__name__)
    return None


def template_planners() -> TemplatePlanners:
    """What this package's templates tell the fusion policy (a new, immutable object each call)."""
    return TemplatePlanners(pairs=PAIR_TEMPLATES, fused_by_default=FUSED_PAIR_TEMPLATES,
                            kernel_plan=kernel_plan, chains=CHAIN_TEMPLATES, prologues=PROLOGUE_TEMPLATES,
                            kernel_estimate=kernel_estimate)
