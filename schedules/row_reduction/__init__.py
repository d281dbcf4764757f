"""Row reductions (LayerNorm, softmax, global average pool): a row per warp with warp shuffles."""

from .rule import RowReduction

__all__ = ["RowReduction"]
