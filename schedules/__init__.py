"""TIR schedule templates for fused groups, one dlight-style ScheduleRule per pattern.

Layout: ``base/`` holds what every template shares (the GPU limits, the rule contract, TIR
matching, the allocation probe, launch bounds, vector-lane analysis); each template is a
subpackage with its rule (``rule.py``), its tile model and search bounds (``tiles.py``) and, where
matching is large, its matcher (``match.py``). :func:`default_rules` lists the rules in the order
``get_pipeline`` tries them, before dlight's own (Matmul, GEMV, Reduction, GeneralReduction,
Fallback last). A rule returns ``None`` for a PrimFunc that is not its pattern, so the next rule
takes it. :func:`template_planners` is what the fusion policy is told about the templates.
"""

from tvm_fusion_hw.plans import KernelPlan

from .attention.rule import Attention
from .conv_pool.rule import ConvPool
from .depthwise.rule import DepthwiseConv
from .dw_pw.rule import DepthwisePointwise
from .elementwise.rule import VectorizedElementwise
from .gemm.rule import ImplicitGemm
from .planners import FUSED_PAIR_TEMPLATES, PAIR_TEMPLATES, kernel_plan, template_planners
from .row_reduction.rule import RowReduction
from .rules import default_rules
from .window_reduction.rule import WindowReduction
from .conv_pool import tiles as _conv_pool_tiles
from .depthwise import tiles as _depthwise_tiles
from .dw_pw import tiles as _dw_pw_tiles
from .gemm import tiles as _gemm_tiles

__all__ = ["Attention", "ConvPool", "DepthwiseConv", "DepthwisePointwise", "ImplicitGemm", "FUSED_PAIR_TEMPLATES",
           "KernelPlan", "PAIR_TEMPLATES", "RowReduction", "VectorizedElementwise", "WindowReduction",
           "clear_caches", "default_rules", "kernel_plan", "template_planners"]


def clear_caches() -> None:
    """Forget what the tile models remember across compiles (rankings by problem, the conv+pool
    bank simulations, divisors), so that the next compile pays its whole cost: compile-time
    measurements time cold compiles."""
    for tiles in (_conv_pool_tiles, _depthwise_tiles, _dw_pw_tiles, _gemm_tiles):
        tiles.clear_caches()
