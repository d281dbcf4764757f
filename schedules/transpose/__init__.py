"""Transposes of the innermost axis (with their element-wise epilogue) through a shared tile."""

from .rule import TiledTranspose

__all__ = ["TiledTranspose"]
