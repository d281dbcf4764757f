"""What the window-reduction rule (:mod:`.rule`) matched and its search bounds.

The grid is the element-wise rule's (:func:`tvm_fusion_hw.schedules.elementwise.tiles.choose_plan`):
one output element per thread where the element-wise rule has one vector, ``k`` outputs a thread
where the grid still launches a wave, threads per block and blocks spread over the SMs from the
hardware profile. The window's loads count as the thread's streams in the register estimate.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Tuple

from tvm_fusion_hw.schedules.elementwise.tiles import ElementwiseConfig, ElementwisePlan, ElementwiseProblem


@dataclasses.dataclass
class WindowConfig(ElementwiseConfig):
    """The element-wise grid's bounds, and which reductions count as a small window.

    Attributes
    ----------
    max_window : int
        Most elements one output reduces (a 7x7 window has 49). A thread reduces its window
        serially; longer reductions are for rules that split them over threads (dlight's
        ``Reduction`` and ``GeneralReduction``, :class:`RowReduction`).
    max_stride : int
        Most elements a load's address moves between neighbouring outputs (along the output's
        innermost axis of extent > 1): a stride-2 pool moves by 2, so a warp's loads stay within a
        few cache lines. A global pool, whose neighbouring outputs are whole planes apart, is not a
        window (:class:`RowReduction` takes it).
    """

    max_window: int = 64
    max_stride: int = 4


@dataclasses.dataclass(frozen=True)
class WindowProblem:
    """A matched window reduction: its outputs, window and loads."""

    shape: Tuple[int, ...]  # the reduction's spatial (output) shape
    window: Tuple[int, ...]  # the reduced extents
    element_bytes: int  # widest element the kernel reads or writes
    streams: int  # distinct loads that move with the output
    broadcasts: int  # distinct loads that do not (a weight, a per-channel scale)
    epilogue: bool  # an element-wise epilogue runs in the same thread

    @property
    def grid_problem(self) -> ElementwiseProblem:
        """The problem in the element-wise grid's terms: one scalar lane per output."""
        return ElementwiseProblem(self.shape, 0, 1, self.element_bytes, self.streams, self.broadcasts)

    @property
    def outputs(self) -> int:
        """Output elements."""
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class WindowPlan:
    """The grid for a window reduction (an element-wise plan of one lane)."""

    grid: ElementwisePlan
    window: int

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.grid.threads

    @property
    def outputs_per_thread(self) -> int:
        """Outputs one thread reduces (``k``), consecutive threads taking consecutive outputs."""
        return self.grid.vectors_per_thread

    def summary(self) -> str:
        """The plan in words, for reports."""
        g = self.grid
        return (f"an output a thread ({self.window}-element window serial), {g.threads} threads a block, "
                f"{g.vectors_per_thread} output(s) a thread, {g.blocks} blocks, "
                f"{g.waves:.2g} waves of resident threads")


__all__ = ["WindowConfig", "WindowPlan", "WindowProblem"]
