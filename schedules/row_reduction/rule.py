"""A schedule rule for row reductions with their element-wise work: LayerNorm, softmax, pooling, GEMV.

A LayerNorm (with the bias and residual adds fused before it), a softmax and a global average
pool are the same kernel shape: rows of ``L`` elements, one or more reductions along each row
(sum, then the squared deviations from the mean; max, then the sum of exponentials; a sum), each
reading what the previous one produced, then an element-wise output per element (or one value
per row). dlight's ``GeneralReduction`` schedules them one row per 256-thread block (64 on ROCm)
and inlines every element-wise step into its consumers: each reduction and the output read the
row from global memory again (3 passes for a LayerNorm or a softmax, the fused adds and the
exponential recomputed in every pass), with scalar accesses, the reduced values in shared
memory, and on a 128-wide softmax half the block idle.

This rule reads every element of a row from global memory once:

- ``T`` threads own a row (a *row per warp*: ``T`` = the warp or wavefront, 32 or 64, from the
  hardware profile), each thread ``L / T`` of its values, interleaved in ``V``-element vectors
  (``float4``) so that every warp access is one contiguous, coalesced segment. Where a thread's
  share would not fit its register budget (the profile's register file at ``Config.occupancy``),
  ``T`` doubles: a *row per block* of several warps for long rows.
- An input that several passes read is loaded once into a register copy (``cache_read`` to
  ``local``); element-wise intermediates (the residual sum, the exponentials) are computed once
  into registers; the row's buffers are laid out ``[J, T, V]`` so that each thread's slice
  compacts to ``J * V`` registers (the rule checks the compacted size before accepting a tile).
- Each reduction is a cross-thread reduction over ``threadIdx.x``: a thread reduces its
  registers, then TVM's allreduce combines the lanes with warp shuffles (``__shfl_down_sync``;
  shared memory only between the warps of a row per block) and every lane gets the result. The
  reduced values and per-row scalars (the mean) stay in registers.
- The output is written once, ``V`` elements per store; several rows share a block
  (``threadIdx.y``), as many as keep the blocks evenly spread over the SMs.

The tile (``T``, ``V``, rows per block) comes from :mod:`.row_tiles`.

Matched from the TIR, not from names: after inlining element-wise chains, every block iterates
the same rows (``S`` axes) and is a reduction along the trailing ``R`` axes, an element-wise
block over ``S + R`` or a per-row block over ``S``; one block writes the one output; every load
that moves along a row reads it contiguously (its trailing indices are the ``R`` iterators) and,
in a reduction, a row of its own or the one vector every row reads. The latter is a GEMV
(``y[n] = sum_k W[n, k] x[k]``: a squeeze-and-excitation FC or a classifier at batch 1, whose
weight rows are contiguous along ``k``): a warp a row of ``W`` in float4 loads, ``x`` read by
every warp from L1. Extent-1 axes count as 0 in the indices (a 1x1 conv of a 1x1 image reads
``x[n, rc, yy + ry, xx + rx]``, a row along ``rc``). A matmul, whose rows share rows of an operand,
and convs and pools with windows are not taken. Anything else returns None and dlight takes it.

Rows the warp does not divide (a ViT's 197 tokens, Swin's 49-token windows) have no guard-free
``[J, T, V]`` layout: they are *streamed*, every pass reading the row again (from L1: a row is a
few hundred bytes) with a guard on its last vector, as many passes as dlight's, but a warp a row
instead of a 256-thread block with most threads idle.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.ir import TensorLoad
from tvm.s_tir.dlight.analysis import get_root_block

from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import const_int, tensor_loads
from tvm_fusion_hw.schedules.base.vector_lanes import dtype_bytes, substitute, uses

from .tiles import RowConfig, RowProblem, RowTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV
_COMBINERS = (tirx.Add, tirx.Mul, tirx.Max, tirx.Min)  # reducers TVM's allreduce recognises
#: TVM's lowering up to buffer compaction, as ``tvm.compile`` runs it: the rule checks that its
#: cross-thread reductions lower and what each thread's buffers compact to.
_LOWERING_PREFIX = ("CanonicalizeLoop", "LowerCrossThreadReduction", "LowerInitBlock",
                    "PlanAndUpdateBufferAllocationLocation", "ConvertBlocksToOpaque",
                    "LiftThreadBinding", "CompactBufferAllocation")


class RowReduction(TiledScheduleRule):
    """Row reductions with element-wise prologues and epilogues (LayerNorm, softmax, pooling, GEMV).

    Returns ``None`` (dlight takes the PrimFunc) for anything else: element-wise kernels,
    reductions not along contiguous trailing axes or whose rows share rows of an operand
    (matmul, conv, windowed pools), dynamic shapes, several outputs, and rows whose values do
    not fit a block's registers. Rows the warp does not divide are streamed (read once a pass).
    """

    #: the search bounds; the class lives beside the tile model (:mod:`.tiles`)
    Config = RowConfig
    stages_in_shared = False  # the rows' buffers are registers, checked while scheduling

    # ---- the rule: TiledScheduleRule calls these ---------------------------------------------
    @staticmethod
    def match(sch, config, limits):
        """``(problem,)``: the rows, the element-wise chains inlined, the blocks classified."""
        problem = _match_and_inline(sch, config, limits.profile.warp_size)
        return None if problem is None else (problem,)

    @staticmethod
    def rank(problem, limits, config):
        """Tiles for ``problem``, best first."""
        return rank_tiles(problem, limits, config)

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """A new schedule of the matched function with ``tile`` (rows kept in ``J * V`` registers)."""
        return _schedule(sch.mod["main"], problem, tile)


# ---- matching ----------------------------------------------------------------------------------
def _role(block: s_tir.SBlock, spatial: Tuple[int, ...], reduced: Tuple[int, ...]) -> Optional[str]:
    """reduction (over S + R), elementwise (S + R), per_row (S), or None."""
    kinds = "".join("S" if iv.iter_type == tirx.IterVar.DataPar else
                    "R" if iv.iter_type == tirx.IterVar.CommReduce else "?" for iv in block.iter_vars)
    extents = tuple(const_int(iv.dom.extent) for iv in block.iter_vars)
    n_s, n_r = len(spatial), len(reduced)
    if extents == spatial + reduced and kinds in ("S" * n_s + "R" * n_r, "S" * (n_s + n_r)):
        return "reduction" if "R" in kinds else "elementwise"
    return "per_row" if extents == spatial and kinds == "S" * n_s else None


def _are(indices, variables) -> bool:
    """``indices`` are exactly ``variables``, in order."""
    return len(indices) == len(variables) and all(
        isinstance(i, tirx.Var) and i.same_as(v) for i, v in zip(indices, variables))


def _without_unit_axes(block: s_tir.SBlock, indices) -> List[tirx.Expr]:
    """``indices`` with the block's extent-1 iterators set to 0 and simplified.

    A 1x1 convolution over a 1x1 image (a squeeze-and-excitation FC at batch 1) reads
    ``x[n, rc, yy + ry, xx + rx]``; its row is ``x[n, rc, 0, 0]``, contiguous along ``rc``."""
    zero = [(iv.var, tirx.IntImm(str(iv.dom.extent.ty), 0)) for iv in block.iter_vars if const_int(iv.dom.extent) == 1]
    analyzer = sym.Analyzer()
    return [analyzer.simplify(substitute(i, zero)) if zero else i for i in indices]


def _are_axes(block: s_tir.SBlock, indices, variables) -> bool:
    """``indices`` walk ``variables`` in order, an extent-1 variable's index being 0."""
    unit = [iv.var for iv in block.iter_vars if const_int(iv.dom.extent) == 1]
    return len(indices) == len(variables) and all(
        (isinstance(i, tirx.Var) and i.same_as(v)) or (const_int(i) == 0 and any(v.same_as(u) for u in unit))
        for i, v in zip(_without_unit_axes(block, indices), variables))


def _is_update(block: s_tir.SBlock, s_vars: Sequence[tirx.Var]) -> bool:
    """``acc[S] = combiner(acc[S], value)`` with a constant init: a reducer TVM's allreduce knows."""
    store, init = block.body, block.init
    if not isinstance(init, tirx.BufferStore) or not isinstance(init.value, (tirx.IntImm, tirx.FloatImm)):
        return False
    return _are(store.indices, s_vars) and isinstance(store.value, _COMBINERS) and any(
        isinstance(x, TensorLoad) and x.source.same_as(store.buffer) and _are(x.indices, s_vars)
        for x in (store.value.a, store.value.b))


def _inline_chains(sch: s_tir.Schedule, root, spatial, reduced, keep_rows: bool = True) -> None:
    """Inline element-wise blocks no reduction reads (the prologue adds into the last one, the
    epilogue steps into the output) and blocks of other shapes (reshapes) into their consumers;
    without ``keep_rows`` the ones reductions read too (recomputed in every pass)."""
    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root)[:-1]:
            role = _role(sch.get(block), spatial, reduced)
            if role in ("reduction", "per_row") or keep_rows and role == "elementwise" and any(
                    _role(sch.get(c), spatial, reduced) == "reduction" for c in sch.get_consumers(block)):
                continue  # a row's values a reduction reads: computed once, kept in registers
            try:
                sch.compute_inline(block)
                changed = True
            except RuntimeError:  # ScheduleError: not inlinable
                continue


def _match_and_inline(  # pylint: disable=too-many-locals,too-many-return-statements,too-many-branches
    sch: s_tir.Schedule, config: "RowReduction.Config", warp_size: int
) -> Optional[RowProblem]:
    """Find the rows, inline the chains and check every access; the problem, or None.

    Rows the warp does not divide (a ViT's 197 tokens, a 7x7 window's 49) are streamed: the
    ``[J, T, V]`` register layout has no guards, so nothing is kept in registers; every pass reads
    the row again (from L1: a row is a few hundred bytes) and the exponentials are recomputed."""
    params = [p for p in sch.mod["main"].params if hasattr(p.ty, "shape")]
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    if any(const_int(d) is None for p in params for d in p.shape):
        return None  # dynamic shapes
    for block in sch.get_child_blocks(root):
        nested: List[s_tir.SBlock] = []
        tvm_ffi.structural_walk(sch.get(block).body, [(s_tir.SBlock, nested.append)], order="post")
        if nested or any(sch.get(lp).kind != tirx.ForKind.SERIAL for lp in sch.get_loops(block)):
            return None  # opaque or already scheduled
    # Step 1a. The rows: the first reduction's leading spatial axes; R: its trailing axes.
    first = next((sch.get(b) for b in sch.get_child_blocks(root)
                  if any(iv.iter_type == tirx.IterVar.CommReduce for iv in sch.get(b).iter_vars)), None)
    if first is None:
        return None  # no reduction: element-wise kernels are VectorizedElementwise's or Fallback's
    n_s = next(i for i, iv in enumerate(first.iter_vars) if iv.iter_type != tirx.IterVar.DataPar)
    extents = tuple(const_int(iv.dom.extent) for iv in first.iter_vars)
    spatial, reduced = extents[:n_s], extents[n_s:]
    if None in extents or _role(first, spatial, reduced) != "reduction":
        return None

    # Step 1b. Inline the chains; every block left has a role, and the last one writes the output.
    streamed = math.prod(reduced) % warp_size != 0
    _inline_chains(sch, root, spatial, reduced, keep_rows=not streamed)
    blocks = [sch.get(b) for b in sch.get_child_blocks(root)]
    names, roles = [b.name_hint for b in blocks], [_role(b, spatial, reduced) for b in blocks]
    if None in roles or len(set(names)) != len(names) or any(
            len(b.writes) != 1 or not isinstance(b.body, tirx.BufferStore) for b in blocks):
        return None
    written = [b.writes[0].source for b in blocks]
    if [any(w.same_as(p) for p in params) for w in written] != [False] * (len(blocks) - 1) + [True]:
        return None  # one output, written by the last block

    # Step 1c. Every access: intermediates at the block's own iterators; inputs along a row
    # contiguously (trailing indices = the R iterators) and, in a reduction, a row of its own.
    readers: Dict[int, List[str]] = {}
    lead: Dict[int, int] = {}
    element_bytes, passes, k = 1, 0, len(reduced)
    for block, name, role in zip(blocks, names, roles):
        ivars = [iv.var for iv in block.iter_vars]
        s_vars, r_vars = ivars[:n_s], ivars[n_s:]
        wide = [v for v, e in zip(s_vars, spatial) if e > 1]
        if role == "reduction" and not _is_update(block, s_vars):
            return None
        reads_row, store = False, block.body
        for access, is_store in [(x, False) for x in tensor_loads(store.value)] + [(store, True)]:
            buf = access.buffer if is_store else access.source
            if dtype_bytes(buf.dtype) is None:
                return None
            element_bytes = max(element_bytes, dtype_bytes(buf.dtype))
            producer = next((r for w, r in zip(written[:-1], roles) if w.same_as(buf)), None)
            if producer is not None:  # an intermediate
                per_element = producer == "elementwise" or is_store and role == "elementwise"
                if not _are(access.indices, ivars if per_element else s_vars):
                    return None
                reads_row = reads_row or (per_element and not is_store)
                continue
            index = next(i for i, p in enumerate(params) if p.same_as(buf))
            if not uses(list(access.indices), r_vars):
                if is_store and role == "elementwise":
                    return None
                continue  # a per-row value or a constant, or a per-row output
            row_part = _without_unit_axes(block, access.indices[:-k])
            if not _are_axes(block, access.indices[-k:], r_vars) or uses(row_part, r_vars) or tuple(
                    const_int(d) for d in buf.shape[-k:]) != reduced:
                return None
            own_row = all(uses(row_part, [v]) for v in wide)
            if not own_row and (is_store or role == "reduction" and uses(row_part, wide)):
                return None  # an output written twice, or rows sharing a row of an operand (matmul)
            if not own_row:
                continue  # one vector every row reads (a GEMV's x): from L1, not kept
            if own_row and not is_store:
                readers[index] = readers.get(index, []) + ([] if name in readers.get(index, []) else [name])
                lead[index], reads_row = len(buf.shape) - k, True
        if role == "reduction" or name == names[-1]:
            passes += int(reads_row)  # GeneralReduction inlines the element-wise blocks: a pass each

    lanes = config.vector_bytes // element_bytes
    while lanes > 1 and math.prod(reduced) % lanes:
        lanes //= 2
    cached = () if streamed else tuple((i, lead[i]) for i, r in readers.items() if len(r) > 1)
    return RowProblem(spatial, reduced, tuple(zip(names, roles)), cached, element_bytes, max(1, lanes),
                      max(1, passes), passes=max(1, passes) if streamed else 1)


# ---- the schedule ------------------------------------------------------------------------------
def _row_map(lead: int, reduced: Tuple[int, ...], tile: RowTile) -> tirx.IndexMap:
    """``(lead dims..., R...) -> (lead dims..., J, T, V)``: a row as ``J`` vectors per thread."""
    width = tile.threads_per_row * tile.lanes

    def mapping(*idx):
        flat = idx[lead]
        for i, extent in enumerate(reduced[1:], start=lead + 1):
            flat = flat * extent + idx[i]
        return [*idx[:lead], flat // width, flat % width // tile.lanes, flat % tile.lanes]

    return tirx.IndexMap.from_func(mapping, ndim=lead + len(reduced))


def _thread_row(sch: s_tir.Schedule, block: SBlockRV, tile: RowTile, n_r: int, vector: bool) -> None:
    """The block's row as ``[J (unrolled), T (threadIdx.x), V (vectorized or unrolled)]``."""
    loops = sch.get_loops(block)
    if tile.guarded:
        j, t, v = sch.split(sch.fuse(*loops[-n_r:]) if n_r > 1 else loops[-1],
                            [None, tile.threads_per_row, tile.lanes])
    else:
        j, t, v = loops[-3:]
    # A cross-thread reduction needs its reduction loops deepest: unit loops (spatial) go first.
    sch.reorder(*sorted((j, t, v), key=lambda loop: const_int(sch.get(loop).extent) != 1))
    sch.bind(t, "threadIdx.x")
    sch.unroll(j)
    if vector and tile.lanes > 1:
        sch.vectorize(v)
    else:
        sch.unroll(v)


def _schedule(func: tirx.PrimFunc, problem: RowProblem, tile: RowTile) -> s_tir.Schedule:
    """Apply ``tile`` to the matched (inlined) ``func``; raises when TVM cannot."""
    n_s, n_r = len(problem.spatial), len(problem.reduced)
    sch = s_tir.Schedule(func)
    root = get_root_block(sch)

    # Step 3a. An input several passes read: one register copy, loaded once for all of them.
    row_buffers = [(name, n_s) for name in problem.kept]
    for index, lead in problem.cached:
        buf = func.params[index]
        readers = [b for b in sch.get_child_blocks(root) if any(r.source.same_as(buf) for r in sch.get(b).reads)]
        position = next(i for i, r in enumerate(sch.get(readers[0]).reads) if r.source.same_as(buf))
        row_buffers.append((sch.get(sch.cache_read(readers[0], position, "local", readers)).name_hint, lead))

    # Step 3b. Every intermediate in registers: the row's values, the reduced and per-row values.
    for name, _ in problem.roles[:-1]:
        sch.set_scope(sch.get_sblock(name), 0, "local")

    # Step 3c. Rows as [J, T, V] in every block along a row and in every row buffer, so that a
    # thread's slice compacts to J x V registers (StmtSimplify resolves the index arithmetic
    # with the blocks' iterator ranges; the schedule restarts from its result).
    if not tile.guarded:
        for name, lead in row_buffers:
            sch.transform_block_layout(sch.get_sblock(name), _row_map(lead, problem.reduced, tile))
            sch.transform_layout(sch.get_sblock(name), ("write", 0), _row_map(lead, problem.reduced, tile))
        for name, role in problem.roles:
            if role != "per_row" and name not in problem.kept:
                sch.transform_block_layout(sch.get_sblock(name), _row_map(n_s, problem.reduced, tile))
        sch = s_tir.Schedule(s_tir.transform.StmtSimplify()(sch.mod)["main"])
        root = get_root_block(sch)

    # Step 3d. Rows over blockIdx.x and threadIdx.y (the output's loops); its row over threadIdx.x.
    output, output_role = problem.roles[-1]
    bx, ty = sch.split(sch.fuse(*sch.get_loops(sch.get_sblock(output))[:n_s]), [None, tile.rows_per_block])
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    if output_role != "per_row":
        _thread_row(sch, sch.get_sblock(output), tile, n_r, vector=output_role == "elementwise")

    # Step 3e. Every other block at its row, consumers first; along the row the same way.
    roles = dict(problem.roles)
    for block in reversed(sch.get_child_blocks(root)[:-1]):
        role = roles.get(sch.get(block).name_hint, "cache")
        if role == "per_row" and tile.threads_per_row > tile.warp_size:
            # A row of several warps reduces through shared memory, and TVM's lowering then
            # computes a per-row value (the mean) in place in that shared result, every thread
            # of the row reading and writing it: a race between the warps (a LayerNorm's mean
            # divided twice). Recomputed where it is used, it is a register again.
            sch.compute_inline(block)
            continue
        sch.compute_at(block, ty, preserve_unit_loops=True)
        if role != "per_row":
            _thread_row(sch, block, tile, n_r, vector=role != "reduction")

    # Step 3f. The cross-thread reductions lower, and each thread's buffers are J x V at most.
    mod = tvm.transform.Sequential([getattr(s_tir.transform, p)() for p in _LOWERING_PREFIX])(
        tvm.IRModule({"main": sch.mod["main"]}))
    sizes = [0]
    tvm_ffi.structural_walk(mod["main"], [(s_tir.SBlock, lambda b: sizes.extend(
        math.prod(int(d) for d in buf.shape) for buf in b.alloc_buffers if buf.scope() == "local"))],
        order="post")
    if max(sizes) > tile.values_per_thread:
        raise RuntimeError(f"a thread's buffer compacts to {max(sizes)} elements, not {tile.values_per_thread}")
    return sch


__all__ = ["RowReduction"]
