"""Depthwise convolutions: a tile of the input window in shared memory, reused across outputs."""

from .rule import DepthwiseConv, match_depthwise, match_depthwise_group

__all__ = ["DepthwiseConv", "match_depthwise", "match_depthwise_group"]
