"""The package's schedule rules in the order ``get_pipeline`` tries them, before dlight's."""

from __future__ import annotations

from typing import List

from tvm.s_tir.dlight.base import ScheduleRule

from .conv_pool.rule import ConvPool
from .depthwise.rule import DepthwiseConv
from .dw_pw.rule import DepthwisePointwise
from .elementwise.rule import VectorizedElementwise
from .gemm.rule import ImplicitGemm
from .row_reduction.rule import RowReduction


def default_rules() -> List[ScheduleRule]:
    """This package's schedule rules, most specific first."""
    # DepthwisePointwise only matches fused depthwise->pointwise PrimFuncs, which exist only where
    # the policy's pair_templates knob turns that pair on.
    return [DepthwisePointwise(), ConvPool(), DepthwiseConv(), ImplicitGemm(), RowReduction(),
            VectorizedElementwise()]
