"""What the transpose rule (:mod:`.rule`) matched, its search bounds and its one tile.

A block moves a ``T x T`` tile (``T``: the warp size, so that a warp's loads and its stores are each
one contiguous row of the tile): ``T`` threads along a row times ``rows`` along the other axis,
each thread ``T / rows`` elements; the tile in shared memory has rows of ``T + 1`` elements so
that a warp reading a column touches ``T`` different banks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits


@dataclasses.dataclass
class TransposeConfig:
    """Search bounds; the hardware figures (warp size, threads per block) come from the target.

    Attributes
    ----------
    rows : int
        Threads along the tile's other axis (each thread moves ``warp / rows`` elements).
    min_tiles_per_multiprocessor : int
        Fewest tiles per SM taken: a smaller transpose is launch-bound, Fallback's as before.
    max_attempts : int
        Tiles tried (one).
    max_threads : int, optional
        The target's threads-per-block limit when below the hardware's (ROCm: 256).
    """

    rows: int = 8
    min_tiles_per_multiprocessor: int = 1
    max_attempts: int = 1
    max_threads: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class TransposePart:
    """One output block's transpose: its shape, the two tiled axes and the transposed input."""

    shape: Tuple[int, ...]  # output shape
    fast: int  # the output's innermost axis of extent > 1 (stores run along it)
    slow: int  # the output axis along which the transposed input is contiguous (its loads run along it)
    read_index: int  # the transposed input's position in the block's reads
    padded_dim: int  # the transposed input's dimension that the output's fast axis indexes

    def tiles(self, size: int) -> int:
        """Tiles of ``size x size`` over the output."""
        rest = math.prod(self.shape) // (self.shape[self.fast] * self.shape[self.slow])
        return rest * math.ceil(self.shape[self.fast] / size) * math.ceil(self.shape[self.slow] / size)


@dataclasses.dataclass(frozen=True)
class TransposeProblem:
    """A matched kernel: one part per output block (a kernel each)."""

    parts: Tuple[TransposePart, ...]
    element_bytes: int


@dataclasses.dataclass(frozen=True)
class TransposeTile:
    """The tile: ``size x size`` elements, ``size x rows`` threads (``blocks``: over every part)."""

    size: int
    rows: int
    blocks: int
    shared_bytes: int

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.size * self.rows

    def summary(self) -> str:
        """The tile in words, for reports."""
        return (f"{self.size}x{self.size} tiles through shared memory ({self.size} x {self.rows} threads, "
                f"rows of {self.size + 1} elements), {self.blocks} blocks")


def plan_tile(problem: TransposeProblem, limits: GPULimits, config: TransposeConfig) -> TransposeTile:
    """The one tile for ``problem`` on ``limits``' GPU: a warp-wide square."""
    size = limits.profile.warp_size
    rows = max(1, min(config.rows, size, (config.max_threads or limits.profile.max_threads_per_block) // size))
    tiles = sum(part.tiles(size) for part in problem.parts)
    return TransposeTile(size, rows, tiles, size * (size + 1) * problem.element_bytes)


__all__ = ["TransposeConfig", "TransposePart", "TransposeProblem", "TransposeTile", "plan_tile"]
