"""The shape every tiled schedule rule here shares: match, rank, schedule the best tile."""

from __future__ import annotations

import dataclasses
from typing import Optional

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.target import Target

from .limits import gpu_limits
from .probe import allocated_shared_bytes


class TiledScheduleRule(GPUScheduleRule):
    """A rule that matches its pattern in the TIR, ranks tiles on the target's hardware profile,
    and schedules the best tile whose shared buffers TVM compacts to the planned size.

    Subclasses give three functions (as static methods) and a ``Config`` with ``max_attempts``:
    ``match(sch, config) -> (problem, *blocks) | None`` (inlining what surrounds the pattern),
    ``rank(problem, limits, config) -> [tile]`` (best first, each with ``shared_bytes``) and
    ``schedule(sch, problem, tile, *blocks)``.
    """

    match = rank = schedule = None  # set by subclasses

    def apply(self, func: tirx.PrimFunc, target: Target, _: bool) -> Optional[s_tir.Schedule]:
        planned = self.schedule_best(func, target)
        return None if planned is None else planned[2]

    def plan(self, func: tirx.PrimFunc, target: Target):
        """The problem the rule sees in ``func`` and the tile it uses, or ``None``."""
        planned = self.schedule_best(func, target)
        return None if planned is None else planned[:2]

    def schedule_tile(self, func: tirx.PrimFunc, target: Target, tile) -> Optional[s_tir.Schedule]:
        """``func`` scheduled with a given ``tile`` (one of ``rank``'s, or made by hand); None when
        ``func`` is not this rule's pattern or the tile fails."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        matched = self.match(sch, self.get_config(target))
        if matched is None:
            return None
        problem, *blocks = matched
        try:
            self.schedule(sch, problem, tile, *blocks)
        except RuntimeError:  # ScheduleError, InternalError
            return None
        return sch

    def schedule_best(self, func: tirx.PrimFunc, target: Target):
        """(problem, tile, schedule) for ``func``, or None when it is not this rule's pattern."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        config = self.get_config(target)
        limits = gpu_limits(target)

        # Step 1. Match the pattern and inline what surrounds it.
        matched_sch = s_tir.Schedule(func)
        matched = self.match(matched_sch, config)
        if matched is None:
            return None
        problem, *blocks = matched

        # Step 2. Rank the tiles on the hardware profile.
        tiles = self.rank(problem, limits, config)

        # Step 3. Schedule the best tile whose shared buffers TVM compacts to the planned size
        # (a tile that does not divide the output can compact to far more); failing that, the
        # first whose compacted buffers still fit a block. Each attempt starts from a copy of the
        # matched schedule (its block handles stay valid in the copy).
        fallback = None
        for tile in tiles[: config.max_attempts]:
            sch = matched_sch.copy()
            try:
                self.schedule(sch, problem, tile, *blocks)
                allocated = allocated_shared_bytes(sch.mod["main"])
            except RuntimeError:  # ScheduleError, or an InternalError of a TVM pass
                continue
            if allocated <= tile.shared_bytes:
                return problem, tile, sch
            if fallback is None and allocated <= limits.shared_memory_bytes_per_block:
                fallback = (problem, dataclasses.replace(tile, shared_bytes=allocated), sch)
        return fallback
