"""A schedule rule for element-wise kernels: vector loads and stores, a grid sized to the GPU.

dlight's ``Fallback`` takes every fused group that has no reduction (element-wise chains,
broadcasts, residual adds, reshapes) and launches one output element per thread,
``max_threads_per_block`` threads per block: scalar loads and stores, and on a large tensor
millions of threads that each compute one address. This rule takes the same PrimFuncs where
vectors pay and are safe, recognised from the TIR: every block spatial, static shapes, and after
inlining every block into the last one, every load of the fused expression is either

- *contiguous*: along ``V`` consecutive output elements its flattened index moves by one element
  per output element (the output's innermost axis with coefficient 1), from an offset that is a
  multiple of ``V`` (a 16-byte aligned ``float4``); or
- *broadcast*: it is the same element for all ``V`` (a per-channel scale, a bias).

Both are decided on the index the kernel will compute: the innermost output axes that ``V``
divides (the fewest) are fused into one index ``V*q + l``, each load's flattened index is written
in ``q``, the lane ``l`` and the outer iterators and simplified with their ranges, and it must
read ``offset + l`` or not depend on ``l``. That is what TVM's vectorizer sees after the schedule
below, so the check predicts ``float4`` accesses rather than hoping for them: a residual add over
7x7 planes vectorizes across them, a per-channel scale needs ``V`` to divide the plane, a reshape
that keeps rows contiguous (BERT's head split) and a channel concat vectorize, while a transpose
of the innermost axis, a strided or gathered load, a misaligned offset, or a condition that
changes within a vector (padding along W) do not.

``V`` is 16 bytes of the widest element the kernel reads or writes (4 for fp32, 8 for fp16), else
the widest half that the accesses and the registers allow, down to 2. The schedule: the vector
axis split by ``V``, the other axes fused with its outer part and split into ``[blockIdx,
threadIdx, k]``: ``k`` vectors per thread (unrolled; a block's threads stride over consecutive
vectors so that every warp access is coalesced), the ``V`` lanes vectorized. Threads per block
and ``k`` come from the target's hardware profile (warp size, threads per block, SMs, resident
threads and blocks, registers): blocks are spread evenly over the SMs (the busiest SM does at
most a few percent more than the average), ``k > 1`` only while the grid still launches at least
one wave of resident threads.

Registers bound ``V`` and ``k``: the compilers hoist every stream's loads when registers allow,
so a vector of each input is live at once (MI300X: 4 VGPRs per fp32 stream at ``V = 4``; sm_90:
22 registers for 2 streams, 32-38 for 8-13). The kernel must keep full occupancy
(``Config.occupancy``): the register feedback loop (``tvm_fusion_hw.feedback``) splits a fused
group whose kernel loses more than 20% of its parts' occupancy, and the one-op parts run at full
occupancy. So ``V`` and ``k`` shrink until ``16 + streams x V x k`` registers fit ``registers per
SM / resident threads per SM`` (32 on an H200: 4 lanes up to 4 streams, 2 up to 8; 64 on an
MI300X).

Where no vector fits, the rule returns None and ``Fallback`` takes the PrimFunc, except on GPUs
whose SM holds a number of threads that Fallback's blocks do not divide (1024-thread blocks on a
1536-thread SM: RTX 3060 and 4090, Jetson AGX Orin leave a third of it idle): there a kernel whose
loads are still coalesced (contiguous or broadcast along the innermost axis) runs with scalar
accesses and this rule's grid. A transpose, strided or gathered load, a reduction, dynamic shapes
and outputs below a warp of vectors are always Fallback's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target

from tvm_fusion_hw.schedules.base.limits import GPULimits, gpu_limits
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import const_int, is_plain_spatial, tensor_loads, trivially_bound
from tvm_fusion_hw.schedules.base.vector_lanes import (coalesced, distinct, dtype_bytes, flat_index, vector_axis)

SBlockRV = s_tir.schedule.SBlockRV



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


class VectorizedElementwise(TiledScheduleRule):
    """Element-wise (spatial, injective) PrimFuncs with vector loads and stores.

    Returns ``None`` (dlight's ``Fallback`` takes it) for anything with a reduction, dynamic
    shapes, a transpose, strided or gathered load, an output smaller than one warp of vectors,
    and where no vector of at least 2 lanes fits the accesses and the registers, unless the
    scalar path applies (see the module docstring and ``Config.min_lanes``).
    """

    @dataclasses.dataclass
    class Config:
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
        """

        vector_bytes: int = 16
        min_lanes: int = 1
        max_vectors_per_thread: int = 4
        min_blocks_per_multiprocessor: int = 8
        min_waves: float = 1.0
        good_balance: float = 0.95
        occupancy: float = 1.0
        max_threads: Optional[int] = None

    def get_config(self, target: Target) -> "VectorizedElementwise.Config":
        """The search bounds: the defaults, with the target's own threads-per-block limit."""
        limit = target.attrs.get("max_num_threads", None)
        return VectorizedElementwise.Config(max_threads=int(limit) if limit is not None else None)

    def schedule_best(self, func: tirx.PrimFunc, target: Target):
        """``(problem, plan, schedule)`` for ``func``, or None (one plan: no tiles to rank, no
        shared memory to check; ``apply`` and ``plan`` come from TiledScheduleRule)."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        config = self.get_config(target)
        limits = gpu_limits(target)
        sch = s_tir.Schedule(func)
        matched = _match_and_inline(sch, config, limits)
        if matched is None:
            return None
        problem, block = matched
        plan = choose_plan(problem, limits, config)
        try:
            _schedule(sch, problem, plan, block)
        except (ScheduleError, RuntimeError):
            return None
        return problem, plan, sch


# ---- matching ----------------------------------------------------------------------------------
def _match_and_inline(  # pylint: disable=too-many-return-statements,too-many-locals,too-many-branches
    sch: s_tir.Schedule, config: "VectorizedElementwise.Config", limits: GPULimits
) -> Optional[Tuple[ElementwiseProblem, SBlockRV]]:
    """Inline every block into the last one and find the vector width; ``(problem, block)`` or None."""
    func = sch.mod["main"]
    buffers = [p for p in func.params if hasattr(p.ty, "shape")]
    if any(const_int(d) is None for buf in buffers for d in buf.ty.shape):
        return None  # dynamic shapes
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    blocks = sch.get_child_blocks(root)
    if not blocks:
        return None
    for block in blocks:
        stmt = sch.get(block)
        if not stmt.iter_vars or any(iv.iter_type != tirx.IterVar.DataPar for iv in stmt.iter_vars):
            return None  # reductions, opaque blocks, scalars
        if any(sch.get(loop).kind != tirx.ForKind.SERIAL for loop in sch.get_loops(block)):
            return None  # already scheduled
        nested: List[s_tir.SBlock] = []
        tvm_ffi.structural_walk(stmt.body, [(s_tir.SBlock, nested.append)], order="post")
        if nested:
            return None

    # Inline everything into the last block (what Fallback's auto-inline does for a chain).
    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root)[:-1]:
            try:
                sch.compute_inline(block)
                changed = True
            except ScheduleError:
                continue
    blocks = sch.get_child_blocks(root)
    if len(blocks) != 1:
        return None
    block = blocks[0]
    stmt = sch.get(block)
    store = stmt.body
    if not isinstance(store, tirx.BufferStore) or not is_plain_spatial(stmt, store.buffer):
        return None
    if not trivially_bound(sch, block):
        return None
    realize = sch.get(sch.get_loops(block)[-1]).body
    if const_int(realize.predicate) != 1:
        return None
    if not any(store.buffer.same_as(b) for b in buffers):
        return None

    shape = tuple(const_int(iv.dom.extent) for iv in stmt.iter_vars)
    ivars = [iv.var for iv in stmt.iter_vars]
    loads = tensor_loads(store.value)
    sizes = [dtype_bytes(store.buffer.dtype)] + [dtype_bytes(ld.source.dtype) for ld in loads]
    element_bytes = None if None in sizes else max(sizes)
    flats = [flat_index(ld) for ld in loads]
    budget = register_budget(limits, config)

    # The widest vector (16 bytes, then halves) that every load reads contiguously or broadcast,
    # over the fewest innermost axes it divides (what does not depend on those axes stays outside
    # the vector loop for TVM's vectorizer: a concat's channel test, a channel's scale), and whose
    # streams fit the register budget.
    found = None
    lanes = config.vector_bytes // element_bytes if element_bytes else 1
    while found is None and lanes >= max(2, config.min_lanes):
        axis = vector_axis(ivars, shape, lanes, loads, flats, store.value)
        if axis is not None and estimate_registers(
                distinct(loads, flats, axis[1], "contiguous"), lanes, element_bytes) <= budget:
            found = lanes, axis
        else:
            lanes //= 2
    if found is None:
        # Scalar accesses, still coalesced (every load moves with the innermost axis or not at
        # all), and only where Fallback's blocks (the target's most threads) leave part of an SM
        # idle: elsewhere Fallback's one element per thread is this schedule.
        fallback_threads = config.max_threads or limits.max_threads_per_block
        if config.min_lanes > 1 or limits.max_threads_per_multiprocessor % fallback_threads == 0:
            return None
        kinds = coalesced(ivars, shape, flats)
        if kinds is None or estimate_registers(
                distinct(loads, flats, kinds, "contiguous"), 1, element_bytes or 4) > budget:
            return None
        found = 1, (0, kinds)
    lanes, (start, kinds) = found
    if math.prod(shape) < limits.warp_size * lanes:
        return None  # less than a warp of vectors: nothing to gain

    problem = ElementwiseProblem(
        shape=shape,
        vector_axes=len(shape) - start,
        lanes=lanes,
        element_bytes=element_bytes or 0,
        streams=distinct(loads, flats, kinds, "contiguous"),
        broadcasts=distinct(loads, flats, kinds, "broadcast"),
    )
    return problem, block


# ---- the grid ----------------------------------------------------------------------------------
def estimate_registers(streams: int, lanes: int, element_bytes: Optional[int],
                       vectors_per_thread: int = 1) -> int:
    """Registers per thread, as an upper bound: addressing and the result (16), and every
    contiguous stream's vectors loaded at once, which is what the compilers do when registers
    allow (measured: TVM's LLVM for gfx942 hoists all 20 loads of a 19-op tree, 78 VGPRs at
    ``V = 4``; ptxas for sm_90 22 registers for 2 fp32 streams and 32-38 for 8-13 at ``V = 4``)."""
    words = vectors_per_thread * max(1, math.ceil(lanes * (element_bytes or 4) / 4))
    return 16 + max(1, streams) * words


def register_budget(limits: GPULimits, config: "VectorizedElementwise.Config") -> int:
    """Registers per thread that keep ``config.occupancy`` of an SM's threads resident (rounded
    down to 8, the allocation unit of NVIDIA and AMD)."""
    budget = int(limits.registers_per_multiprocessor
                 / (limits.max_threads_per_multiprocessor * config.occupancy)) // 8 * 8
    return min(limits.max_registers_per_thread, budget)


def _thread_counts(limits: GPULimits, config: "VectorizedElementwise.Config") -> List[int]:
    """Threads per block to try: powers of two times the warp, from the fewest that still fill an
    SM within its block limit to the most that leave ``min_blocks_per_multiprocessor`` per SM."""
    warp = limits.warp_size
    lowest = max(warp, limits.max_threads_per_multiprocessor // limits.max_blocks_per_multiprocessor)
    highest = max(warp, min(
        limits.max_threads_per_block,
        config.max_threads or limits.max_threads_per_block,
        limits.max_threads_per_multiprocessor // config.min_blocks_per_multiprocessor,
    ))
    counts, threads = [], warp
    while threads <= highest:
        if threads >= lowest:
            counts.append(threads)
        threads *= 2
    return counts or [warp]


def choose_plan(
    problem: ElementwiseProblem, limits: GPULimits, config: "VectorizedElementwise.Config"
) -> ElementwisePlan:
    """Threads per block and vectors per thread for ``problem`` on the GPU of ``limits``.

    Each candidate is scored by how evenly its blocks spread over the SMs: the average work per
    SM over the work of the busiest one (``ceil(blocks / SMs)`` blocks). Candidates at least
    ``good_balance`` even tie; among them more vectors per thread win (fewer index computations,
    more loads in flight per thread), then larger blocks. ``k > 1`` must keep at least
    ``min_waves`` of resident threads launched and its registers within the budget.
    """
    budget = register_budget(limits, config)
    sms = limits.multiprocessor_count
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


# ---- the schedule ------------------------------------------------------------------------------
def _schedule(sch: s_tir.Schedule, problem: ElementwiseProblem, plan: ElementwisePlan,
              block: SBlockRV) -> None:
    """``[blockIdx, threadIdx, k (unrolled), V (vectorized)]``: the vector axis split by ``V``,
    the axes outside it fused with its outer part (``V = 1``: all axes fused, no vector loop)."""
    loops = sch.get_loops(block)
    outer, inner = loops[: len(loops) - problem.vector_axes], loops[len(loops) - problem.vector_axes:]
    axis = sch.fuse(*inner) if len(inner) > 1 else inner[0]
    if problem.lanes > 1:
        vector, lanes = sch.split(axis, factors=[None, problem.lanes])
    else:
        vector, lanes = axis, None
    if outer:
        vector = sch.fuse(*outer, vector)
    if plan.vectors_per_thread > 1:
        bx, k, tx = sch.split(vector, factors=[None, plan.vectors_per_thread, plan.threads])
        sch.reorder(bx, tx, k)
        sch.unroll(k)
    else:
        bx, tx = sch.split(vector, factors=[None, plan.threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    if lanes is not None:
        sch.vectorize(lanes)


__all__ = ["ElementwisePlan", "ElementwiseProblem", "VectorizedElementwise", "choose_plan"]
