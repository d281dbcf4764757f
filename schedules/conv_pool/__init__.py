"""A convolution and the pooling window after it in one kernel, the conv tile in shared memory."""

from .rule import ConvPool, pair_plan, supports_pair

__all__ = ["ConvPool", "pair_plan", "supports_pair"]
