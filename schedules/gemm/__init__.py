"""Matmuls and non-depthwise convolutions as an implicit GEMM with their epilogue (rule, tile model, search
bounds and fitted constants)."""

from .rule import ASYNC_COPY_CONFIG, ImplicitGemm, async_copy_enabled, supports_async_copy

__all__ = ["ASYNC_COPY_CONFIG", "ImplicitGemm", "async_copy_enabled", "supports_async_copy"]
