"""The tile model of :mod:`.rule`: how one attention kernel's query rows map onto a block.

A block owns ``TQ`` query rows of one head (``batch x heads`` heads, ``Lq`` queries, ``Lk`` keys,
head dims ``D`` for the scores and ``Dv`` for the values). Its ``W`` warps take ``R = TQ / W`` rows
each; a lane holds ``R x JC`` scores (``JC = Lk / 32`` consecutive keys, read as float4
vectors) in registers while it sums over ``D``, then ``R x ceil(Dv / 32)`` outputs while it sums
over the keys.

Shared memory, what the block keeps on chip (``shared.dyn``, merged by TVM where lifetimes do not
overlap): the phase of the scores (the query tile and every key of the head, ``TQ x D + D x Lk``),
the phase of the softmax (scores, probabilities and two values per row, ``2 x TQ x Lk + 2 x TQ``)
and the phase of the output (probabilities and every value row of the head, ``TQ x Lk + Lk x Dv``);
the largest phase is the block's need. Every key of the head is on chip in the first phase and every
value row in the last: that is what must fit the profile's shared memory per block, and where it
does not the policy keeps the three kernels.

Time: the larger of two bounds a wave. Each block stages its query rows and every key and value
of its head (``(TQ + Lk) x (D + Dv)`` elements), at an SM's share of the DRAM bandwidth: small query
tiles restage the keys and values often. And each phase is issue-bound on shared-memory loads or
FMAs (``R + JC`` loads per ``R x JC`` FMAs a lane and head dim, a shared load taking the issue
slots of 4 FMAs), the grid in waves of the blocks that fit an SM at once. Latency (a warp's
dependent FMA chains, the staging loads in flight) is not modelled: measured times are 2-10x the
model's, and the search bounds (8 warps of 1-2 rows) come from a measured sweep instead.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional

from tvm_fusion_hw.schedules.base.limits import GPULimits, tile_occupancy

#: warp-wide shared-memory load instructions an SM issues per clock, against 4 FMA instructions
#: (NVIDIA since Volta: 32 lanes x 4 B = 128 B/clock of shared bandwidth, 4 FMA pipes of 32 lanes)
LOADS_PER_FMA_ISSUE = 4


@dataclasses.dataclass
class AttentionConfig:
    """Search bounds.

    Attributes
    ----------
    query_rows : tuple of int
        Query rows per block to try.
    warps : tuple of int
        Warps per block to try.
    max_accumulators : int
        Most scores a lane may hold in registers (``R x JC``).
    max_rows_per_warp : int
        Most query rows a warp owns (``R``). Warps of 1-2 rows, 8 a block, measured fastest on an
        H200 for every shape swept (bench/results/2026-12-03-h200-attention); 4-8 rows a warp up to
        3x slower: a warp's long dependent FMA chains, too few warps to hide them.
    key_vector : int
        A lane's consecutive keys are read as vectors of this many (float4): the keys of a head
        must be a multiple of ``lanes x key_vector`` (the template declines other lengths: read a
        float at a time, its kernel measured slower than the three kernels apart).
    register_overhead : int
        Registers besides the accumulators (addresses, loop counters, the softmax's values).
    max_threads : int, optional
        The target's threads-per-block limit when below the hardware's.
    max_attempts : int
        Tiles tried before giving up.
    """

    query_rows: tuple = (8, 16, 32)
    warps: tuple = (8,)
    max_accumulators: int = 64
    max_rows_per_warp: int = 2
    key_vector: int = 4
    register_overhead: int = 40
    max_threads: Optional[int] = None
    max_attempts: int = 3


@dataclasses.dataclass(frozen=True)
class AttentionProblem:
    """One attention: ``heads`` (batch x heads) independent ``(Lq x D) . (D x Lk)`` score
    matrices, their row softmax, and ``(Lq x Lk) . (Lk x Dv)``."""

    heads: int
    queries: int
    keys: int
    head_dim: int
    value_dim: int
    element_bytes: int = 4

    @property
    def flops(self) -> int:
        return 2 * self.heads * self.queries * self.keys * (self.head_dim + self.value_dim)


@dataclasses.dataclass(frozen=True)
class AttentionTile:
    """``query_rows`` rows a block over ``warps`` warps of ``lanes`` threads."""

    query_rows: int
    warps: int
    lanes: int
    shared_bytes: int
    registers_estimate: int
    blocks: int
    time_s: float
    compute_s: float = 0.0  # the issue bound of time_s
    dram_s: float = 0.0  # the staging bound of time_s
    shared_scope: str = "shared.dyn"

    @property
    def threads(self) -> int:
        return self.warps * self.lanes

    @property
    def rows_per_warp(self) -> int:
        return self.query_rows // self.warps

    def summary(self) -> str:
        return (f"{self.query_rows} query rows a block, {self.warps} warps x {self.rows_per_warp} rows, "
                f"every key and value of the head on chip ({self.shared_bytes} B shared), {self.blocks} blocks, "
                f"model {self.time_s * 1e6:.1f} us")


def shared_bytes(problem: AttentionProblem, query_rows: int) -> int:
    """The largest of the three phases' shared buffers (see the module docstring)."""
    tq, lk, d, dv = query_rows, problem.keys, problem.head_dim, problem.value_dim
    phases = (tq * d + d * lk, 2 * tq * lk + 2 * tq, tq * lk + lk * dv)
    return max(phases) * problem.element_bytes


def keys_vectorize(problem: AttentionProblem, lanes: int, config: AttentionConfig) -> bool:
    """Whether each lane's keys are whole ``key_vector``-wide vectors (see :class:`AttentionConfig`)."""
    return problem.keys % (lanes * config.key_vector) == 0


def rank_tiles(problem: AttentionProblem, limits: GPULimits, config: AttentionConfig,
               fit: bool = True) -> List[AttentionTile]:
    """The tiles that fit ``limits``, fastest first by the model of the module docstring;
    ``fit=False``: those too that need more shared memory than a block may have (timed as one
    block an SM), so that a policy can say how much the kernel would need."""
    profile = limits.profile
    lanes = profile.warp_size
    if not keys_vectorize(problem, lanes, config):
        return []
    key_columns = math.ceil(problem.keys / lanes)
    value_columns = math.ceil(problem.value_dim / lanes)
    max_threads = min(profile.max_threads_per_block, config.max_threads or profile.max_threads_per_block)
    tiles = []
    for query_rows in config.query_rows:
        for warps in config.warps:
            rows = query_rows // warps
            if rows < 1 or query_rows % warps or warps * lanes > max_threads or rows > config.max_rows_per_warp:
                continue
            if query_rows > problem.queries and query_rows > min(config.query_rows):
                continue  # a tile past the last query (memcheck: its rows read past TVM's compacted buffers)
            if rows * key_columns > config.max_accumulators:
                continue
            smem = shared_bytes(problem, query_rows)
            fits = smem <= limits.shared_limit("shared.dyn")
            if fit and not fits:
                continue
            registers = rows * (key_columns + value_columns) + config.register_overhead
            occ = tile_occupancy(limits, warps * lanes, registers, smem if fits else 0)
            if occ.blocks_per_multiprocessor < 1:
                continue
            blocks = problem.heads * math.ceil(problem.queries / query_rows)
            # issue slots a block takes (an FMA warp instruction each, a shared load 4): scores,
            # softmax (3 passes over its scores), output, and the loads of Q, K and V
            scores = warps * problem.head_dim * max((rows + key_columns) * LOADS_PER_FMA_ISSUE, rows * key_columns)
            output = warps * problem.keys * max((rows + value_columns) * LOADS_PER_FMA_ISSUE, rows * value_columns)
            softmax = 3 * query_rows * key_columns * LOADS_PER_FMA_ISSUE
            loads = (query_rows * problem.head_dim + problem.keys * (problem.head_dim + problem.value_dim)) \
                / lanes * 2 * LOADS_PER_FMA_ISSUE
            per_block = scores + output + softmax + loads
            # every block stages its query rows and all of its head's keys and values: at best at
            # an SM's share of the DRAM bandwidth (the profile's figure; L2 hits only do better)
            staged_bytes = (query_rows * (problem.head_dim + problem.value_dim)
                            + problem.keys * (problem.head_dim + problem.value_dim)) * problem.element_bytes
            multiprocessors = profile.multiprocessor_count
            resident = occ.blocks_per_multiprocessor if fits else 1
            waves = math.ceil(blocks / (multiprocessors * resident))
            # an SM's resident blocks share its issue rate and its share of the bandwidth
            per_sm = min(resident, math.ceil(blocks / multiprocessors))
            issue_s = per_sm * per_block * multiprocessors / limits.warp_instructions_per_s
            staging_s = per_sm * staged_bytes * multiprocessors / profile.dram_bytes_per_s
            time_s = waves * max(issue_s, staging_s)
            tiles.append(AttentionTile(query_rows, warps, lanes, smem, registers, blocks, time_s,
                                       waves * issue_s, waves * staging_s))
    return sorted(tiles, key=lambda t: (t.time_s, -t.query_rows))
