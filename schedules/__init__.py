"""TIR schedule templates for fused groups, one dlight-style ScheduleRule per pattern.

:func:`default_rules` lists this package's rules in the order ``get_pipeline`` tries them, before
dlight's own (Matmul, GEMV, Reduction, GeneralReduction, Fallback last). A rule returns ``None`` for
a PrimFunc that is not its pattern, so the next rule takes it.
"""

from typing import Callable, Dict, List

from tvm.s_tir.dlight.base import ScheduleRule

from .conv_pool import ConvPool, pair_plan
from .depthwise_conv import DepthwiseConv
from .dw_pw import DepthwisePointwise
from .dw_pw import supports_pair as dw_pw_supports_pair
from .elementwise import VectorizedElementwise
from .gemm import ImplicitGemm
from .plans import KernelPlan, kernel_plan
from .row_reduction import RowReduction

#: Complex pairs ("producer kind->consumer kind") that a template here runs as one kernel, each
#: with what the fusion policy asks before fusing (on the two PrimFuncs, unfused). Without a
#: template dlight would write the intermediate to a global workspace and lose the tiled schedule.
#: An entry is a check ``(producer, consumer) -> bool`` (the policy's own tile model then judges
#: the fit) or a planner ``(producer, consumer, target) -> KernelPlan | None`` (the policy checks
#: the plan's shared memory, registers and occupancy; None: the template cannot run the pair).
#: See :mod:`.plans`.
PAIR_TEMPLATES: Dict[str, Callable] = {
    "conv->window": pair_plan,
    "pointwise_conv->window": pair_plan,
    "depthwise_conv->pointwise_conv": dw_pw_supports_pair,
}
#: The pairs the policy fuses by default; its ``pair_templates`` knob names others.
#: depthwise_conv->pointwise_conv stays out: on the H200 the fused kernel is slower than the two
#: kernels apart (dw_pw micro-graph 10.8 against 9.4 us at batch 1, 120 against 74 us at batch 32;
#: MobileNetV2 b32 1.21x slower, b1 8% faster end to end from 4 fewer launches; see
#: bench/results/2026-11-30-h200-dw-pw). ``pair_templates=(..., "depthwise_conv->pointwise_conv")``
#: turns it on.
FUSED_PAIR_TEMPLATES: tuple = ("conv->window", "pointwise_conv->window")


def default_rules() -> List[ScheduleRule]:
    """This package's schedule rules, most specific first."""
    # DepthwisePointwise only matches fused depthwise->pointwise PrimFuncs, which exist only where
    # the policy's pair_templates knob turns that pair on.
    return [DepthwisePointwise(), ConvPool(), DepthwiseConv(), ImplicitGemm(), RowReduction(),
            VectorizedElementwise()]


__all__ = ["ConvPool", "DepthwiseConv", "DepthwisePointwise", "ImplicitGemm", "FUSED_PAIR_TEMPLATES",
           "KernelPlan", "PAIR_TEMPLATES", "RowReduction", "VectorizedElementwise", "default_rules",
           "kernel_plan"]
