"""3x3 stride-1 convolutions by Winograd F(m x m, 3 x 3): the transforms (TE) and their schedule rule."""

from .rule import WinogradTransform

__all__ = ["WinogradTransform"]
