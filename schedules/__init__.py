"""TIR schedule templates for fused groups, one dlight-style ScheduleRule per pattern.

:func:`default_rules` lists this package's rules in the order ``get_pipeline`` tries them, before
dlight's own (Matmul, GEMV, Reduction, GeneralReduction, Fallback last). A rule returns ``None`` for
a PrimFunc that is not its pattern, so the next rule takes it.
"""

from typing import List

from tvm.s_tir.dlight.base import ScheduleRule

from .depthwise_conv import DepthwiseConv

#: Complex pairs ("producer kind->consumer kind") that some template here keeps on chip in one
#: kernel. The fusion policy fuses only these pairs: without a template dlight would write the
#: intermediate to a global workspace and lose the producer's tiled schedule.
FUSED_PAIR_TEMPLATES: tuple = ()


def default_rules() -> List[ScheduleRule]:
    """This package's schedule rules, most specific first."""
    return [DepthwiseConv()]


__all__ = ["DepthwiseConv", "FUSED_PAIR_TEMPLATES", "default_rules"]
