"""The grid model of the element-wise rule (:mod:`.rule`): what it matched, its search bounds,
and how its vectors are spread over the GPU.

:func:`choose_plan` picks threads per block and vectors per thread ``k`` for a matched kernel from
the target's hardware profile (warp size, threads per block, SMs, resident threads and blocks,
registers); :func:`estimate_registers` bounds a thread's registers, which must fit the register
file's share at ``ElementwiseConfig.occupancy``. See :mod:`.rule` for the matching, the schedule
and the measurements.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits, registers_per_thread_at_occupancy


@dataclasses.dataclass
class ElementwiseConfig:
    """Search bounds; the hardware figures come from the target, not from here.

    Attributes
    ----------
    vector_bytes : int
        Bytes of one vector access (16: ``float4``, the widest load of CUDA and AMDGPU).
    min_lanes : int
        Narrowest vector the rule takes. 1 (the default): where no vector fits (a width that
        does not divide, a misaligned offset, too many streams for the registers) the rule
        still takes a kernel whose loads are coalesced, with scalar accesses and the
        profile's grid, on GPUs where ``Fallback``'s blocks leave part of an SM idle (1024
        threads on a 1536-thread SM: a third); 2: vectors only.
    max_vectors_per_thread : int
        Upper bound on ``k``.
    min_blocks_per_multiprocessor : int
        Threads per block are at most ``max_threads_per_multiprocessor / this``, so that
        several blocks share an SM (one block's tail overlaps another's start).
    min_waves : float
        ``k > 1`` only while the grid launches at least this many waves of resident threads.
    good_balance : float
        Spreads of blocks over the SMs at least this even count as equally good; among them
        more vectors per thread, then larger blocks, win.
    occupancy : float
        Occupancy the kernel must keep; its register budget bounds ``V`` and ``k``.
    max_threads : int, optional
        Threads per block the target lets a kernel launch, when fewer than the hardware's
        (``tvm_fusion_hw.hardware.target`` caps ROCm at 256: TVM's AMDGPU codegen assumes no more).
    max_attempts : int
        Plans tried (one: the grid model gives a single plan).
    """

    vector_bytes: int = 16
    min_lanes: int = 1
    max_vectors_per_thread: int = 4
    min_blocks_per_multiprocessor: int = 8
    min_waves: float = 1.0
    good_balance: float = 0.95
    occupancy: float = 1.0
    max_threads: Optional[int] = None
    max_attempts: int = 1


@dataclasses.dataclass(frozen=True)
class ElementwiseProblem:
    """A matched element-wise kernel: its output, the vector width and what it loads."""

    shape: Tuple[int, ...]  # output shape
    vector_axes: int  # the innermost output axes fused into the vectorized one
    lanes: int  # V: elements per vector
    element_bytes: int  # widest element the kernel reads or writes
    streams: int  # distinct contiguous loads (a vector each in registers per vector of output)
    broadcasts: int  # distinct loads that are the same for a whole vector

    @property
    def elements(self) -> int:
        """Output elements."""
        return math.prod(self.shape)

    @property
    def vectors(self) -> int:
        """Output vectors of ``lanes`` elements."""
        return self.elements // self.lanes


@dataclasses.dataclass(frozen=True)
class ElementwisePlan:
    """How the vectors are spread over the GPU, and what the model thought of it."""

    threads: int  # threads per block
    vectors_per_thread: int  # k
    blocks: int
    balance: float  # average work per SM / work of the busiest SM
    waves: float  # launched threads / resident threads of the whole GPU
    registers_estimate: int

    def summary(self) -> str:
        """The plan in words, for reports."""
        return (f"{self.threads} threads a block, {self.vectors_per_thread} vector(s) a thread, "
                f"{self.blocks} blocks, {self.waves:.2g} waves of resident threads")


@dataclasses.dataclass(frozen=True)
class ElementwiseOutputs:
    """A kernel with several output blocks (a split, a tensor and its copy): a problem each, a
    GPU kernel each."""

    parts: Tuple[ElementwiseProblem, ...]


@dataclasses.dataclass(frozen=True)
class ElementwiseOutputPlans:
    """A plan per output block of :class:`ElementwiseOutputs`; the figures a report or a fusion
    policy reads are those of the largest kernel."""

    plans: Tuple[ElementwisePlan, ...]

    @property
    def threads(self) -> int:
        return max(p.threads for p in self.plans)

    @property
    def registers_estimate(self) -> int:
        return max(p.registers_estimate for p in self.plans)

    @property
    def blocks(self) -> int:
        return sum(p.blocks for p in self.plans)

    def summary(self) -> str:
        """The plans in words, for reports."""
        texts = [p.summary() for p in self.plans]
        if len(set(texts)) == 1:
            return f"{len(texts)} outputs, a kernel each of {texts[0]}"
        return f"{len(texts)} outputs, a kernel each: " + "; ".join(texts)


# ---- the grid ----------------------------------------------------------------------------------
def estimate_registers(streams: int, lanes: int, element_bytes: Optional[int],
                       vectors_per_thread: int = 1) -> int:
    """Registers per thread, as an upper bound: addressing and the result (16), and every
    contiguous stream's vectors loaded at once, which is what the compilers do when registers
    allow (measured: TVM's LLVM for gfx942 hoists all 20 loads of a 19-op tree, 78 VGPRs at
    ``V = 4``; ptxas for sm_90 22 registers for 2 fp32 streams and 32-38 for 8-13 at ``V = 4``)."""
    words = vectors_per_thread * max(1, math.ceil(lanes * (element_bytes or 4) / 4))
    return 16 + max(1, streams) * words


def _thread_counts(limits: GPULimits, config: ElementwiseConfig) -> List[int]:
    """Threads per block to try: powers of two times the warp, from the fewest that still fill an
    SM within its block limit to the most that leave ``min_blocks_per_multiprocessor`` per SM."""
    profile = limits.profile
    warp = profile.warp_size
    lowest = max(warp, profile.max_threads_per_multiprocessor // profile.max_blocks_per_multiprocessor)
    highest = max(warp, min(
        profile.max_threads_per_block,
        config.max_threads or profile.max_threads_per_block,
        profile.max_threads_per_multiprocessor // config.min_blocks_per_multiprocessor,
    ))
    counts, threads = [], warp
    while threads <= highest:
        if threads >= lowest:
            counts.append(threads)
        threads *= 2
    return counts or [warp]


def choose_plan(
    problem: ElementwiseProblem, limits: GPULimits, config: ElementwiseConfig
) -> ElementwisePlan:
    """Threads per block and vectors per thread for ``problem`` on the GPU of ``limits``.

    Each candidate is scored by how evenly its blocks spread over the SMs: the average work per
    SM over the work of the busiest one (``ceil(blocks / SMs)`` blocks). Candidates at least
    ``good_balance`` even tie; among them more vectors per thread win (fewer index computations,
    more loads in flight per thread), then larger blocks. ``k > 1`` must keep at least
    ``min_waves`` of resident threads launched and its registers within the budget.
    """
    budget = registers_per_thread_at_occupancy(limits, config.occupancy)
    sms = limits.profile.multiprocessor_count
    vectors = problem.vectors
    best, best_key = None, None
    k = 1
    while k <= config.max_vectors_per_thread:
        regs = estimate_registers(problem.streams, problem.lanes, problem.element_bytes, k)
        for threads in _thread_counts(limits, config):
            blocks = math.ceil(vectors / (threads * k))
            waves = blocks * threads / limits.resident_threads
            if k > 1 and (regs > budget or waves < config.min_waves):
                continue
            balance = (vectors / sms) / (math.ceil(blocks / sms) * threads * k)
            key = (min(balance, config.good_balance), k, threads)
            if best_key is None or key > best_key:
                best_key = key
                best = ElementwisePlan(threads, k, blocks, balance, waves, regs)
        k *= 2
    assert best is not None
    return best


__all__ = ["ElementwiseConfig", "ElementwiseOutputPlans", "ElementwiseOutputs", "ElementwisePlan", "ElementwiseProblem", "choose_plan", "estimate_registers"]
