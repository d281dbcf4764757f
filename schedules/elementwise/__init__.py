"""Element-wise and broadcast kernels with vector loads and a grid sized to the GPU."""

from .rule import VectorizedElementwise

__all__ = ["VectorizedElementwise"]
