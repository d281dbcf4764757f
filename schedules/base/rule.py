"""The contract every schedule template here follows: match, rank, schedule, check, finish.

:class:`TiledScheduleRule` is a dlight ``ScheduleRule`` whose ``apply`` runs five steps; each
template gives the first three and keeps or overrides the last two (and may ``prepare`` the
PrimFunc first: a rewrite into the form its matcher reads, e.g. a grouped conv's channel split;
the default keeps it):

1. ``match(sch, config, limits) -> (problem, *blocks) | None``: recognise the pattern in the TIR
   and inline what surrounds it; None: not this rule's PrimFunc (the next rule takes it);
2. ``rank(problem, limits, config) -> [tile]``: the tiles to try, best first, from the tile model
   on the target's hardware profile (``limits``);
3. ``schedule(sch, problem, tile, *blocks) -> Schedule | None``: apply one tile (to ``sch`` in
   place, returning None, or returning a new schedule);
4. ``check(sch, problem, tile, limits) -> (tile, exact) | None``: whether the scheduled result is
   what the tile planned; the default compares the shared memory TVM compacts the buffers to with
   the tile's ``shared_bytes`` (exact), or accepts it while it fits a block (not exact, the tile's
   figure corrected; a tile whose ``shared_scope`` is ``shared.dyn`` against the dynamic limit);
   None refuses the tile;
5. ``finish(sch, tile) -> Schedule``: a last rewrite of the chosen schedule (launch bounds, say);
   the default returns it unchanged.

The first exact tile is taken, else the first accepted one. A tile whose scheduling raises a
``ScheduleError`` (or a ``ValueError`` of a check) is skipped; any other exception leaves the rule
and is the pipeline's to handle (:mod:`tvm_fusion_hw.guarded_schedule` hands the kernel on).
``Config`` is a dataclass of search bounds with ``max_attempts``.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Optional, Sequence, Tuple

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.target import Target

from .config_changes import changed
from .limits import GPULimits, gpu_limits
from .probe import allocated_shared_bytes
from .unchecked import without_schedule_checks

#: What one tile's failed scheduling raises: the next tile is tried.
TILE_ERRORS = (RuntimeError, ValueError)  # ScheduleError (a RuntimeError), a pass's failed check


def thread_limit(target: Target) -> Optional[int]:
    """The target's own threads-per-block limit (``max_num_threads``), where it sets one: the
    ``max_threads`` of the rules whose grid comes from the profile."""
    limit = target.attrs.get("max_num_threads", None)
    return int(limit) if limit is not None else None


class TiledScheduleRule(GPUScheduleRule, metaclass=abc.ABCMeta):
    """A rule that matches its pattern in the TIR, ranks tiles on the target's hardware profile,
    and schedules the best tile that checks out (see the module docstring for the five steps)."""

    Config: type  # the search bounds, a dataclass with ``max_attempts`` (set by subclasses)

    def __init_subclass__(cls, **kwargs):
        """Each rule's ``get_config`` (its own or the one it inherits) returns its config with the
        changes a build made for the rule's class name (:mod:`.config_changes`)."""
        super().__init_subclass__(**kwargs)
        get_config, name = cls.get_config, cls.__name__

        @functools.wraps(get_config)
        def get_changed_config(self, target: Target):
            return changed(name, get_config(self, target))

        cls.get_config = get_changed_config

    # ---- the steps a template gives ------------------------------------------------------------
    @staticmethod
    @abc.abstractmethod
    def match(sch: s_tir.Schedule, config, limits: GPULimits) -> Optional[Tuple]:
        """``(problem, *blocks)`` of the pattern in ``sch`` (surroundings inlined), or None."""

    @staticmethod
    @abc.abstractmethod
    def rank(problem, limits: GPULimits, config) -> Sequence:
        """The tiles for ``problem``, best first."""

    @staticmethod
    @abc.abstractmethod
    def schedule(sch: s_tir.Schedule, problem, tile, *blocks) -> Optional[s_tir.Schedule]:
        """Apply ``tile`` to the matched blocks of ``sch`` (in place: None; or a new schedule)."""

    #: whether the rule's schedules allocate shared memory (False: registers only, nothing for
    #: :meth:`check` to compare with the plan)
    stages_in_shared = True

    # ---- the steps with defaults -----------------------------------------------------------------
    def get_config(self, target: Target):
        """The search bounds for ``target``: ``Config``'s defaults, with the target's own
        threads-per-block limit where ``Config`` has a ``max_threads`` field."""
        if "max_threads" in {f.name for f in dataclasses.fields(self.Config)}:
            return self.Config(max_threads=thread_limit(target))
        return self.Config()

    def prepare(self, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """``func`` rewritten (same computation) into the form ``match`` reads; here unchanged."""
        return func

    def check(self, sch: s_tir.Schedule, problem, tile, limits: GPULimits):  # pylint: disable=unused-argument
        """``(tile, exact)``: the shared buffers compact to the tile's plan (exact), or still fit a
        block (the tile's ``shared_bytes`` corrected); None: refused. A tile that does not divide
        the output can compact to far more than planned. A rule that stages nothing in shared
        memory (:attr:`stages_in_shared`) is accepted as scheduled, without running the compaction
        (about 10-30 ms a schedule)."""
        if not self.stages_in_shared:
            return tile, True
        allocated = self.shared_bytes_of(sch, limits)
        if allocated <= tile.shared_bytes:
            return tile, True
        if allocated <= limits.shared_limit(getattr(tile, "shared_scope", "shared")):
            return dataclasses.replace(tile, shared_bytes=allocated), False
        return None

    def shared_bytes_of(self, sch: s_tir.Schedule, limits: GPULimits) -> int:  # pylint: disable=unused-argument
        """Shared memory the scheduled kernel allocates, as :meth:`check` compares it with the plan:
        here its buffers as TVM compacts them (a rule whose buffers TVM merges measures otherwise)."""
        return allocated_shared_bytes(sch.mod["main"])

    def finish(self, sch: s_tir.Schedule, tile) -> s_tir.Schedule:  # pylint: disable=unused-argument
        """The chosen schedule, rewritten once more if the template needs it (here: unchanged)."""
        return sch

    # ---- what dlight and the fusion policy call -------------------------------------------------
    def apply(self, func: tirx.PrimFunc, target: Target, _: bool) -> Optional[s_tir.Schedule]:
        planned = self.schedule_best(func, target)
        self._last_tile = (func, None if planned is None else planned[1])
        return None if planned is None else planned[2]

    def planned_tile(self, func: tirx.PrimFunc):
        """The tile the last :meth:`apply` chose for ``func`` (the same object), so that a caller
        can report it without planning again; None if that call was on another PrimFunc."""
        last = getattr(self, "_last_tile", None)
        return last[1] if last is not None and last[0].same_as(func) else None

    def plan(self, func: tirx.PrimFunc, target: Target):
        """The problem the rule sees in ``func`` and the tile it uses, or ``None``."""
        planned = self.schedule_best(func, target)
        return None if planned is None else planned[:2]

    @without_schedule_checks
    def estimate(self, func: tirx.PrimFunc, target: Target):
        """The problem and the tile :meth:`plan` tries first, from the ranking alone: neither
        scheduled nor checked (a cost model's figure for a kernel that is not built as it is).
        ``None`` when ``func`` is not this rule's pattern or no tile fits."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        config, limits = self.get_config(target), gpu_limits(target)
        matched = self.match(s_tir.Schedule(self.prepare(func)), config, limits)
        if matched is None:
            return None
        first = next(iter(self.rank(matched[0], limits, config)), None)
        return None if first is None else (matched[0], first)

    @without_schedule_checks
    def schedule_tile(self, func: tirx.PrimFunc, target: Target, tile) -> Optional[s_tir.Schedule]:
        """``func`` scheduled with a given ``tile`` (one of ``rank``'s, or made by hand), finished
        but not checked; None when ``func`` is not this rule's pattern or the tile fails."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(self.prepare(func))
        matched = self.match(sch, self.get_config(target), gpu_limits(target))
        if matched is None:
            return None
        problem, *blocks = matched
        try:
            sch = self.schedule(sch, problem, tile, *blocks) or sch
        except TILE_ERRORS:
            return None
        return self.finish(sch, tile)

    def try_tile(self, matched_sch: s_tir.Schedule, problem, tile, blocks, limits: GPULimits):
        """``(schedule, checked tile, exact)`` of ``tile`` on a copy of the matched schedule (its
        block handles stay valid in the copy), or None when it fails or the check rejects it."""
        try:
            sch = matched_sch.copy()
            sch = self.schedule(sch, problem, tile, *blocks) or sch
            verdict = self.check(sch, problem, tile, limits)
        except TILE_ERRORS:
            return None
        return None if verdict is None else (sch, *verdict)

    @without_schedule_checks
    def schedule_best(self, func: tirx.PrimFunc, target: Target):
        """(problem, tile, schedule) for ``func``, or None when it is not this rule's pattern."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        config = self.get_config(target)
        limits = gpu_limits(target)

        # Step 1. Match the pattern and inline what surrounds it.
        matched_sch = s_tir.Schedule(self.prepare(func))
        matched = self.match(matched_sch, config, limits)
        if matched is None:
            return None
        problem, *blocks = matched

        # Step 2. Rank the tiles on the hardware profile.
        tiles = self.rank(problem, limits, config)

        # Step 3. Schedule and check the tiles in order; each attempt starts from a copy of the
        # matched schedule (its block handles stay valid in the copy).
        accepted = None
        for tile in list(tiles)[: config.max_attempts]:
            tried = self.try_tile(matched_sch, problem, tile, blocks, limits)
            if tried is None:
                continue
            sch, checked, exact = tried
            if exact:
                return problem, checked, self.finish(sch, checked)
            if accepted is None:
                accepted = (problem, checked, sch)

        # Step 4. Else the first tile that was accepted at all.
        if accepted is None:
            return None
        return accepted[0], accepted[1], self.finish(accepted[2], accepted[1])
