"""A depthwise convolution and the pointwise convolution after it in one kernel."""

from .rule import DepthwisePointwise, pair_plan, supports_pair

__all__ = ["DepthwisePointwise", "pair_plan", "supports_pair"]
