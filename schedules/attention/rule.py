"""A schedule rule for attention as ONE kernel: scores, their scale and mask, softmax, and . V.

Stock FuseOps puts ``Q . K^T`` (with its scale and mask), the softmax and ``P . V`` in three
kernels (two complex ops never share one), and writes the score matrix to global memory and reads
it back twice. Our fusion pass groups the three where this rule plans a kernel that fits the
profile (:func:`chain_plan`, asked before fusion); this rule then schedules the group's PrimFunc.

Matched from the TIR, not from names: the first block is a contraction ``S[b.., i, j] += A[b.., i,
d] * B[b.., d, j]``; the last a contraction ``O[b.., i, e] += P[b.., i, j] * V[b.., j, e]`` over the
same leading axes; between them element-wise blocks over ``S``'s shape (scale, mask, exp; inlined
into their readers) and row reductions over ``j`` (the softmax's max and sum), and the one block
``P`` that the last contraction reads; after it, element-wise blocks that inline into it. Anything
else returns None; keys a lane cannot read as float4 vectors (a head's keys not a multiple of 128:
ViT's 197 tokens, Swin's 49-token windows), whose kernel measured slower than the three kernels
apart, get no tile (:func:`.tiles.rank_tiles`), so the rule declines them too.

Structure (:mod:`.tiles` sizes it): a block per ``TQ`` query rows of one head, ``W`` warps of
``R`` rows each. The block loads its query tile and every key of the head into shared memory; each
lane sums ``R x JC`` scores in registers (keys ``lane * JC ...``) and writes them to shared; each
softmax reduction is a warp per row, lanes striding the keys, reduced with shuffles; the
probabilities go to shared; the value rows of the head are loaded (into the space the keys held:
TVM merges ``shared.dyn`` buffers whose lifetimes do not overlap) and each lane sums ``R x
ceil(Dv/32)`` outputs (``lane * C ...``). Every intermediate stays on chip.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.target import Target

from tvm_fusion_hw.plans import KernelPlan, as_plan
from tvm_fusion_hw.schedules.base.limits import GPULimits, gpu_limits
from tvm_fusion_hw.schedules.base.probe import merged_dynamic_shared_bytes
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import is_reduction, mac_operands
from tvm_fusion_hw.schedules.base.vector_lanes import dtype_bytes

from .tiles import AttentionConfig, AttentionProblem, AttentionTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV
SCOPE = "shared.dyn"
#: loads a thread issues before it stores the first of them, staging Q, K and V
LOADS_IN_FLIGHT = 8


class Attention(TiledScheduleRule):
    """``Q . K^T`` (+ element-wise) -> row softmax -> ``. V`` in one PrimFunc, as one kernel.

    Returns ``None`` for any PrimFunc that is not such a group (see the module docstring)."""

    Config = AttentionConfig

    def is_target_available(self, target: Target) -> bool:
        """CUDA only: TVM 0.27's AMDGPU codegen cannot synchronise ``shared.dyn``."""
        return target.kind.name == "cuda"

    @staticmethod
    def match(sch: s_tir.Schedule, config, limits):
        """``(problem, scores, rows, probabilities, output)``, the surroundings inlined; or None."""
        return _match(sch)

    @staticmethod
    def rank(problem: AttentionProblem, limits: GPULimits, config) -> Sequence[AttentionTile]:
        return rank_tiles(problem, limits, config)

    @staticmethod
    def schedule(sch: s_tir.Schedule, problem: AttentionProblem, tile: AttentionTile, *blocks) -> None:
        _schedule(sch, tile, *blocks)

    def shared_bytes_of(self, sch: s_tir.Schedule, limits: GPULimits) -> int:
        """The lowered kernel's one ``shared.dyn`` allocation: TVM merges the phases' buffers."""
        return merged_dynamic_shared_bytes(sch.mod["main"], limits)


def chain_plan(scores: tirx.PrimFunc, softmax: tirx.PrimFunc, output: tirx.PrimFunc,
               target: Target) -> Optional[KernelPlan]:
    """The plan this rule would run ``scores -> softmax -> output`` with on ``target`` (the three
    PrimFuncs unfused, as the fusion policy sees them), or None when it would not take them (not
    CUDA; keys not a multiple of ``lanes x key_vector``). Where no tile fits the target's shared
    memory, the tile that needs the least: the policy says so."""
    if target.kind.name != "cuda":
        return None  # TVM 0.27's AMDGPU codegen cannot synchronise shared.dyn ("Do not support sync")
    problem = chain_problem(scores, softmax, output)
    if problem is None:
        return None
    limits, config = gpu_limits(target), Attention().get_config(target)
    tiles = rank_tiles(problem, limits, config) or sorted(
        rank_tiles(problem, limits, config, fit=False), key=lambda t: t.shared_bytes)
    return as_plan(tiles[0], "Attention") if tiles else None


def chain_problem(scores: tirx.PrimFunc, softmax: tirx.PrimFunc, output: tirx.PrimFunc) -> Optional[AttentionProblem]:
    """The attention the three unfused PrimFuncs make, or None: ``scores`` a contraction into
    ``[.., Lq, Lk]``, ``softmax`` row reductions over the same shape's last axis, ``output`` a
    contraction over ``Lk`` of the probabilities with ``[.., Lk, Dv]``."""
    first, last = _contraction(scores), _contraction(output)
    if first is None or last is None:
        return None
    (lead, (lq, lk), head_dim), (lead2, (lq2, dv), keys) = first, last
    if lead != lead2 or lq != lq2 or keys != lk or not _is_row_softmax(softmax, lead + [lq, lk]):
        return None
    return AttentionProblem(math.prod(lead), lq, lk, head_dim, dv, _element_bytes(output))


# ---- matching ---------------------------------------------------------------------------------
def _iter_extents(block: s_tir.SBlock) -> Optional[Tuple[List[int], List[int]]]:
    """(spatial extents, reduction extents) of a block, or None when one is not a constant."""
    spatial, reduce = [], []
    for iv in block.iter_vars:
        if not isinstance(iv.dom.extent, tirx.IntImm):
            return None
        (reduce if iv.iter_type == tirx.IterVar.CommReduce else spatial).append(int(iv.dom.extent))
    return spatial, reduce


def _contraction(func: tirx.PrimFunc):
    """``(leading extents, (rows, columns), reduced extent)`` of a PrimFunc that is one
    contraction block ``C[.., r, c] += A[.., r, k] * B[.., k, c]``, else None."""
    blocks = _blocks(func)
    if len(blocks) != 1 or not _contraction_block(blocks[0]):
        return None
    extents = _iter_extents(blocks[0])
    if extents is None or len(extents[1]) != 1 or len(extents[0]) < 2:
        return None
    spatial, (reduced,) = extents
    return spatial[:-2], tuple(spatial[-2:]), reduced


def _contraction_block(block: s_tir.SBlock) -> bool:
    """``C[..] = C[..] + A[..] * B[..]`` with an init, operands of ``C``'s rank."""
    store = block.body
    return block.init is not None and isinstance(store, tirx.BufferStore) and \
        mac_operands(block, len(store.indices)) is not None


def _is_row_softmax(func: tirx.PrimFunc, shape: List[int]) -> bool:
    """Reductions over the last axis of ``shape`` and element-wise blocks over it: a softmax."""
    blocks = _blocks(func)
    reductions = 0
    for block in blocks:
        extents = _iter_extents(block)
        if extents is None:
            return False
        spatial, reduce = extents
        if reduce:
            if spatial != shape[:-1] or reduce != shape[-1:]:
                return False
            reductions += 1
        elif spatial not in (shape, shape[:-1]):
            return False
    return reductions >= 1 and _extents_of_output(func) == shape


def _extents_of_output(func: tirx.PrimFunc) -> List[int]:
    return [int(x) if isinstance(x, tirx.IntImm) else -1 for x in func.params[-1].ty.shape]


def _blocks(func: tirx.PrimFunc) -> List[s_tir.SBlock]:
    found = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, found.append)], order="pre")
    return [b for b in found if b.name_hint != "root"]


def _element_bytes(func: tirx.PrimFunc) -> int:
    return dtype_bytes(func.params[-1].ty.dtype)


def _match(sch: s_tir.Schedule):
    """See :meth:`Attention.match`."""
    root = get_root_block(sch)
    blocks = list(sch.get_child_blocks(root))
    get = sch.get
    reductions = [i for i, b in enumerate(blocks) if is_reduction(get(b))]
    if len(reductions) < 3 or reductions[0] != 0:
        return None
    first, last = blocks[reductions[0]], blocks[reductions[-1]]
    if not (_contraction_block(get(first)) and _contraction_block(get(last))):
        return None
    s_extents, o_extents = _iter_extents(get(first)), _iter_extents(get(last))
    if s_extents is None or o_extents is None or len(s_extents[1]) != 1 or len(o_extents[1]) != 1:
        return None
    (s_spatial, (head_dim,)), (o_spatial, (keys,)) = s_extents, o_extents
    if len(s_spatial) < 2 or s_spatial[:-1] != o_spatial[:-1] or s_spatial[-1] != keys:
        return None
    lead, queries, value_dim = s_spatial[:-2], s_spatial[-2], o_spatial[-1]
    rows = [blocks[i] for i in reductions[1:-1]]
    for block in rows:
        if _iter_extents(get(block)) != (lead + [queries], [keys]):
            return None
    between = [b for b in blocks[1:reductions[-1]] if b not in rows]
    if not between:
        return None
    try:
        # Step 1. The element-wise blocks after the output inline into it; those between the two
        # contractions into their readers, but the probabilities the output reads.
        for block in reversed(blocks[reductions[-1] + 1:]):
            sch.reverse_compute_inline(block)
        probabilities = between[-1]
        if _iter_extents(get(probabilities)) != (lead + [queries, keys], []):
            return None
        for block in between[:-1]:
            sch.compute_inline(block)
    except (tvm.TVMError, RuntimeError, ValueError):
        return None
    if any(not _loops_in_order(sch, b) for b in [first, *rows, probabilities, last]):
        return None
    problem = AttentionProblem(math.prod(lead), queries, keys, head_dim, value_dim,
                               dtype_bytes(get(last).body.buffer.dtype))
    return problem, first, rows, probabilities, last


def _loops_in_order(sch: s_tir.Schedule, block: SBlockRV) -> bool:
    """Each loop of ``block`` binds its iterators in order (the legalized ``T.grid`` form)."""
    loops = sch.get_loops(block)
    ivs = sch.get(block).iter_vars
    return len(loops) == len(ivs) and all(
        int(sch.get(loop).extent) == int(iv.dom.extent) for loop, iv in zip(loops, ivs))


# ---- scheduling -------------------------------------------------------------------------------
def _schedule(sch: s_tir.Schedule, tile: AttentionTile, scores: SBlockRV, rows: Sequence[SBlockRV],
              probabilities: SBlockRV, output: SBlockRV) -> None:
    """Apply ``tile`` (see the module docstring)."""
    warps, lanes = tile.warps, tile.lanes
    scope = SCOPE

    def threads(y, x):
        sch.bind(y, "threadIdx.y")
        sch.bind(x, "threadIdx.x")

    # Step 1. The output: a block per TQ query rows of a head; a lane R rows x C value columns.
    *lead, i, e, j = sch.get_loops(output)
    i_block, i_in = sch.split(i, [None, tile.query_rows])
    head = sch.fuse(*lead, i_block)
    sch.bind(head, "blockIdx.x")
    _register_tiled(sch, output, i_in, e, j, tile, threads)

    # Step 2. The probabilities, into shared memory: a warp a row, lanes along the keys.
    sch.compute_at(probabilities, head)
    sch.set_scope(probabilities, 0, scope)
    _warp_per_row(sch, probabilities, warps, lanes, threads)

    # Step 3. The softmax's reductions (max, sum): a warp a row, reduced across the lanes.
    for block in reversed(rows):
        sch.compute_at(block, head)
        sch.set_scope(block, 0, scope)
        _warp_per_row(sch, block, warps, lanes, threads)

    # Step 4. The scores: a lane R rows x JC consecutive keys in registers, summed over D.
    sch.compute_at(scores, head)
    sch.set_scope(scores, 0, scope)
    _register_tiled(sch, scores, *sch.get_loops(scores)[-3:], tile, threads)

    # Step 5. Q and every key of the head, then every value row, into shared memory (the value
    # load placed right before the output, so that it may reuse the keys' space).
    staged = [sch.cache_read(scores, 0, scope), sch.cache_read(scores, 1, scope)]
    for block in staged:
        sch.compute_at(block, head)
    values = sch.cache_read(output, 1, scope)
    sch.compute_at(values, head)
    for block in staged + [values]:
        # unrolled, so that a thread has several loads in flight (a loop of one load each waits
        # for each: 100 KiB of keys and values then take a block tens of microseconds)
        fused = sch.fuse(*sch.get_loops(block)[1:])
        elements = int(sch.get(fused).extent)
        depth = max(1, min(LOADS_IN_FLIGHT, elements // (warps * lanes)))
        _, unrolled, y, x = sch.split(fused, [None, depth, warps, lanes])
        threads(y, x)
        sch.unroll(unrolled)
    sch.decompose_reduction(scores, sch.get_loops(scores)[-3])
    sch.decompose_reduction(output, sch.get_loops(output)[-3])


def _register_tiled(sch: s_tir.Schedule, block: SBlockRV, rows, columns, reduced, tile: AttentionTile,
                    threads) -> None:
    """A contraction as a warp ``R`` rows, a lane consecutive columns, accumulated in registers
    over ``reduced`` and written back after it."""
    ty, r = sch.split(rows, [tile.warps, tile.rows_per_warp])
    tx, c = sch.split(columns, [tile.lanes, None])
    sch.reorder(ty, tx, reduced, r, c)
    threads(ty, tx)
    sch.unroll(r)
    sch.unroll(c)
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), tx)


def _warp_per_row(sch: s_tir.Schedule, block: SBlockRV, warps: int, lanes: int, threads) -> None:
    """The block's last two loops (rows, keys) as a warp a row, lanes striding the keys."""
    rows, keys = sch.get_loops(block)[-2:]
    rows_out, ty = sch.split(rows, [None, warps])
    keys_out, tx = sch.split(keys, [None, lanes])
    sch.reorder(rows_out, ty, tx, keys_out)
    threads(ty, tx)
