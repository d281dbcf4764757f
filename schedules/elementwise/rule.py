"""A schedule rule for element-wise kernels: vector loads and stores, a grid sized to the GPU.

dlight's ``Fallback`` takes every fused group that has no reduction (element-wise chains,
broadcasts, residual adds, reshapes) and launches one output element per thread,
``max_threads_per_block`` threads per block: scalar loads and stores, and on a large tensor
millions of threads that each compute one address. This rule takes the same PrimFuncs where
vectors pay and are safe, recognised from the TIR: every block spatial, static shapes, and after
inlining every block into the blocks that write outputs (one, or several: a split, as attention's
query/key/value split, is a kernel per output), every load of each fused expression is either

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

import math
from typing import List, Optional, Tuple

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block

from tvm_fusion_hw.schedules.base.limits import GPULimits, registers_per_thread_at_occupancy
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import (
    const_int,
    inline_all_but,
    is_plain_spatial,
    tensor_loads,
    trivially_bound,
)
from tvm_fusion_hw.schedules.base.vector_lanes import coalesced, distinct, dtype_bytes, flat_index, vector_axis

from .tiles import (
    ElementwiseConfig,
    ElementwiseOutputPlans,
    ElementwiseOutputs,
    ElementwisePlan,
    ElementwiseProblem,
    choose_plan,
    estimate_registers,
)

SBlockRV = s_tir.schedule.SBlockRV



class VectorizedElementwise(TiledScheduleRule):
    """Element-wise (spatial, injective) PrimFuncs with vector loads and stores.

    Returns ``None`` (dlight's ``Fallback`` takes it) for anything with a reduction, dynamic
    shapes, a transpose, strided or gathered load, an output smaller than one warp of vectors,
    and where no vector of at least 2 lanes fits the accesses and the registers, unless the
    scalar path applies (see the module docstring and ``Config.min_lanes``).
    """

    #: the search bounds; the class lives beside the grid model (:mod:`.tiles`)
    Config = ElementwiseConfig
    stages_in_shared = False  # no shared memory

    # ---- the rule: TiledScheduleRule calls these (one plan: no tiles to rank) -------------------
    @staticmethod
    def match(sch, config, limits):
        """``(problem, block)``: everything inlined into one block, the vector width found."""
        return _match_and_inline(sch, config, limits)

    @staticmethod
    def rank(problem, limits, config):
        """The one plan: vector width, threads and grid on the profile (one per output block)."""
        if isinstance(problem, ElementwiseOutputs):
            return [ElementwiseOutputPlans(tuple(choose_plan(p, limits, config) for p in problem.parts))]
        return [choose_plan(problem, limits, config)]

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply the plan to the block (each output block its own kernel)."""
        if isinstance(problem, ElementwiseOutputs):
            for part, plan, block in zip(problem.parts, tile.plans, blocks):
                _schedule(sch, part, plan, block)
        else:
            _schedule(sch, problem, tile, *blocks)


# ---- matching ----------------------------------------------------------------------------------
def _match_and_inline(  # pylint: disable=too-many-return-statements
    sch: s_tir.Schedule, config: "VectorizedElementwise.Config", limits: GPULimits
) -> Optional[Tuple]:
    """Inline every block into the blocks that write outputs and find each one's vector width:
    ``(problem, block)`` for one output, ``(ElementwiseOutputs, *blocks)`` for several (a split:
    a kernel each); None where any output block does not match."""
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

    # Inline everything into the blocks that write outputs (what Fallback's auto-inline does for
    # a chain); a block left that writes none (it feeds an output only through another output's
    # buffer, say) is not this rule's.
    outputs = [b for b in blocks if any(w.source.same_as(p) for w in sch.get(b).writes for p in buffers)]
    if not outputs or inline_all_but(sch, root, outputs):
        return None
    problems = [_match_block(sch, block, buffers, config, limits) for block in outputs]
    if None in problems:
        return None
    if len(outputs) == 1:
        return problems[0], outputs[0]
    return (ElementwiseOutputs(tuple(problems)), *outputs)


def _match_block(  # pylint: disable=too-many-return-statements,too-many-locals
    sch: s_tir.Schedule, block: SBlockRV, buffers, config: "VectorizedElementwise.Config", limits: GPULimits
) -> Optional[ElementwiseProblem]:
    """The vector width and streams of one output block, everything inlined into it; None where
    no vector (nor the scalar path) fits."""
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
    budget = registers_per_thread_at_occupancy(limits, config.occupancy)

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
        fallback_threads = config.max_threads or limits.profile.max_threads_per_block
        if config.min_lanes > 1 or limits.profile.max_threads_per_multiprocessor % fallback_threads == 0:
            return None
        kinds = coalesced(ivars, shape, flats)
        if kinds is None or estimate_registers(
                distinct(loads, flats, kinds, "contiguous"), 1, element_bytes or 4) > budget:
            return None
        found = 1, (0, kinds)
    lanes, (start, kinds) = found
    if math.prod(shape) < limits.profile.warp_size * lanes:
        return None  # less than a warp of vectors: nothing to gain

    problem = ElementwiseProblem(
        shape=shape,
        vector_axes=len(shape) - start,
        lanes=lanes,
        element_bytes=element_bytes or 0,
        streams=distinct(loads, flats, kinds, "contiguous"),
        broadcasts=distinct(loads, flats, kinds, "broadcast"),
    )
    return problem


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


__all__ = ["ElementwiseOutputs", "ElementwisePlan", "ElementwiseProblem", "VectorizedElementwise", "choose_plan"]
