"""Small-window reductions (average and max pools, short column sums) one output per thread."""

from .rule import WindowReduction

__all__ = ["WindowReduction"]
