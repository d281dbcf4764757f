"""The package's schedule rules in the order ``get_pipeline`` tries them, before dlight's."""

from __future__ import annotations

from typing import List, Sequence

from tvm.s_tir.dlight.base import ScheduleRule

from tvm_fusion_hw.errors import FusionHWError

from .attention.rule import Attention
from .conv_pool.rule import ConvPool
from .depthwise.rule import DepthwiseConv
from .dw_pw.rule import DepthwisePointwise
from .elementwise.rule import VectorizedElementwise
from .gemm.rule import ImplicitGemm
from .row_reduction.rule import RowReduction
from .transpose.rule import TiledTranspose
from .window_reduction.rule import WindowReduction
from .winograd.rule import WinogradTransform


def default_rules() -> List[ScheduleRule]:
    """This package's schedule rules, most specific first."""
    # DepthwisePointwise only matches fused depthwise->pointwise PrimFuncs, which exist only where
    # the policy's pair_templates knob turns that pair on.
    # TiledTranspose last, as it ran on the H200 (bench/results/2026-12-02-h200-corpus-6): it
    # takes only what VectorizedElementwise declines, innermost-axis transposes.
    # Attention only matches fused scores -> softmax -> . V PrimFuncs, WinogradTransform only the
    # transforms' annotated blocks.
    return [DepthwisePointwise(), WinogradTransform(), Attention(), ConvPool(), DepthwiseConv(), ImplicitGemm(), RowReduction(),
            WindowReduction(), VectorizedElementwise(), TiledTranspose()]


def opt_in_rules() -> List[ScheduleRule]:
    """Templates written but not yet run on a GPU: not in :func:`default_rules`; a build names
    them (:func:`rules_named`, a bundle variant's ``schedules=``) to try them. None today."""
    return []


def rules_named(names: Sequence[str]) -> List[ScheduleRule]:
    """The rules whose class names are ``names`` (the default ones and :func:`opt_in_rules`), in
    the default order, opt-in ones last (e.g. every template but ImplicitGemm, to find which one
    a wrong result comes from)."""
    rules = default_rules() + opt_in_rules()
    known = [type(r).__name__ for r in rules]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FusionHWError(f"unknown schedule rule(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [r for r in rules if type(r).__name__ in names]
