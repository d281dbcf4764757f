"""The tile model of :mod:`.row_reduction`: how a kernel's rows map onto threads.

A row of ``L`` elements is owned by ``T`` threads, each holding ``J x V`` of its values (``J``
vectors of ``V`` elements, interleaved so that a warp's access is contiguous). ``T`` is the warp
or wavefront of the hardware profile (32 on NVIDIA, 64 on AMD): a *row per warp*, reduced with
shuffles alone; where a thread's share of the rows kept in registers would exceed the budget,
``T`` doubles (a *row per block* of several warps, whose allreduce adds a shared-memory step).

Registers: about ``16 + (row buffers + 1) x values per thread`` (the extra buffer: the loads in
flight of the pass that streams from global memory, e.g. LayerNorm's weight and bias), within
~10% of ptxas for sm_90 (BERT's LayerNorm: 64 modelled, 68 measured at 24 values per lane).
The budget is ``Config.occupancy`` of the register file: a row's values are many loads in flight
per thread, so fewer resident warps keep the memory busy than an element-wise kernel needs.

Several rows share a block (``threadIdx.y``): the most, up to ``Config.block_threads``, that still
spread the blocks evenly over the SMs (BERT at batch 1 has 128 rows of LayerNorm for 132 SMs: one
warp a block; at batch 32, 4096 rows: 8 a block).
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits, registers_per_thread_at_occupancy


@dataclasses.dataclass
class RowConfig:
    """Search bounds; the hardware figures come from the target, not from here.

    Attributes
    ----------
    vector_bytes : int
        Bytes of one vector access (16: ``float4``).
    occupancy : float
        Occupancy a thread's registers must allow (0.375: 24 of an H200's 64 warps per SM).
    register_overhead : int
        Registers besides the row's values (addresses, reduced values, the allreduce).
    block_threads : int
        Most threads per block when several rows share one.
    good_balance : float
        Spreads of blocks over the SMs at least this even tie; more rows per block win.
    max_threads : int, optional
        The target's threads-per-block limit when below the hardware's (ROCm: 256).
    max_attempts : int
        Tiles tried before giving up.
    """

    vector_bytes: int = 16
    occupancy: float = 0.375
    register_overhead: int = 16
    block_threads: int = 256
    good_balance: float = 0.95
    max_threads: Optional[int] = None
    max_attempts: int = 4


@dataclasses.dataclass(frozen=True)
class RowProblem:
    """A matched kernel: its rows, its blocks by role (by name), what a row costs."""

    spatial: Tuple[int, ...]  # extents of the row axes S
    reduced: Tuple[int, ...]  # extents of the axes along a row R
    roles: Tuple[Tuple[str, str], ...]  # (block, reduction|elementwise|per_row); the output last
    cached: Tuple[Tuple[int, int], ...]  # (parameter, its dims before the row) several passes read
    element_bytes: int  # widest element the kernel touches
    max_lanes: int  # widest vector the row length and the element size allow
    dlight_passes: int  # reads of each row from global memory under GeneralReduction
    passes: int = 1  # reads of each row under this rule: 1, or every pass where rows are streamed

    @property
    def rows(self) -> int:
        """Number of rows."""
        return math.prod(self.spatial)

    @property
    def length(self) -> int:
        """Elements per row (L)."""
        return math.prod(self.reduced)

    @property
    def kept(self) -> List[str]:
        """Element-wise intermediates, computed once into registers (not the output's block)."""
        return [name for name, role in self.roles[:-1] if role == "elementwise"]

    @property
    def row_buffers(self) -> int:
        """Row-sized buffers a thread keeps in registers: cached inputs and intermediates."""
        return len(self.cached) + len(self.kept)


@dataclasses.dataclass(frozen=True)
class RowTile:  # pylint: disable=too-many-instance-attributes
    """How rows map onto threads, and what the model thought of it."""

    threads_per_row: int  # T: the warp (a row per warp) or several warps (a row per block)
    lanes: int  # V: elements per vector access
    rows_per_block: int  # extent of threadIdx.y
    blocks: int
    values_per_thread: int  # J * V: elements of each row buffer one thread holds
    guarded: bool  # the row's last vector is partly past its end (streamed rows only)
    registers_estimate: int
    warp_size: int
    dlight_passes: int  # for the report: reads of each row under dlight
    shared_bytes: int = 0  # no shared tile (a row per block's allreduce adds a few words)
    passes: int = 1  # reads of each row under this tile (more than one: streamed rows)

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.threads_per_row * self.rows_per_block

    def summary(self) -> str:
        """The tile in words, for reports."""
        warps = self.threads_per_row // self.warp_size
        kind = "a row per warp" if warps == 1 else f"a row per block of {warps} warps"
        access = f"{self.lanes}-wide vectors" if self.lanes > 1 else "scalar"
        reads = "once" if self.passes == 1 else f"{self.passes} times (streamed: the warp does not divide it)"
        return (f"{kind}: {self.threads_per_row} threads x {self.values_per_thread} values ({access}), "
                f"{self.rows_per_block} row(s) a block, {self.blocks} blocks, ~{self.registers_estimate} "
                f"registers; each row read {reads} (dlight: {self.dlight_passes})")


def _rows_per_block(rows: int, threads_per_row: int, limit: int, limits: GPULimits,
                    config: RowConfig) -> int:
    """Rows sharing a block: the most (up to ``block_threads`` threads) that keep the blocks
    spread evenly over the SMs (average work per SM over the busiest SM's)."""
    sms, best, best_key, rpb = limits.profile.multiprocessor_count, 1, None, 1
    while rows % rpb == 0 and (rpb == 1 or rpb * threads_per_row <= min(limit, config.block_threads)):
        balance = (rows / sms) / (math.ceil(rows // rpb / sms) * rpb)
        key = (min(balance, config.good_balance), rpb)
        if best_key is None or key > best_key:
            best, best_key = rpb, key
        rpb *= 2
    return best


def rank_tiles(problem: RowProblem, limits: GPULimits, config: RowConfig) -> List[RowTile]:
    """Tiles for ``problem``, fewest threads per row first: a row per warp, then per block.

    ``T`` is the warp (wavefront) times a power of two, at most the target's threads per block;
    ``V`` the widest vector that divides a thread's share. Rows kept in registers need ``T x V``
    to divide ``L`` (no guards in their layout); a streamed row (every input read by one pass)
    takes a guard on its last vector. The register estimate must fit ``registers_per_thread_at_occupancy(limits, config.occupancy)``.
    """
    warp, length = limits.profile.warp_size, problem.length
    limit = min(limits.profile.max_threads_per_block, config.max_threads or limits.profile.max_threads_per_block)
    budget, kept = registers_per_thread_at_occupancy(limits, config.occupancy), problem.row_buffers > 0
    tiles, threads = [], warp
    while threads <= limit:
        lanes = problem.max_lanes
        while lanes > 1 and ((length // threads) % lanes if kept else threads * lanes > length):
            lanes //= 2
        per_thread = math.ceil(length / (threads * lanes)) * lanes
        registers = config.register_overhead + (problem.row_buffers + 1) * math.ceil(
            per_thread * problem.element_bytes / 4)
        if (not kept or length % threads == 0) and registers <= budget:
            rpb = _rows_per_block(problem.rows, threads, limit, limits, config)
            tiles.append(RowTile(threads, lanes, rpb, problem.rows // rpb, per_thread,
                                 per_thread * threads != length, registers, warp, problem.dlight_passes,
                                 passes=problem.passes))
        threads *= 2
    return tiles



__all__ = ["RowConfig", "RowProblem", "RowTile", "rank_tiles"]
