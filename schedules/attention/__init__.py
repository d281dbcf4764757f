"""Attention (scores, scale and mask, softmax, . V) as one kernel, every key and value on chip."""

from .rule import Attention, chain_plan

__all__ = ["Attention", "chain_plan"]
