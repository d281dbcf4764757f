"""A schedule rule for transposes of the innermost axis, with their element-wise epilogue.

ConvNeXt's permutes around its channels-last LayerNorm (NCHW to NHWC and back, the back one fused
with the layer scale and the residual add) and attention's key transpose move the innermost axis:
no vector fits them (:class:`VectorizedElementwise` declines) and dlight's ``Fallback`` gives each
output element a thread, so either the loads or the stores of a warp are ``T`` elements apart.

This rule moves a ``T x T`` tile per block (``T``: the warp size) through shared memory: a warp
reads one row of the tile along the input's contiguous axis and writes one row along the
output's, the tile's rows padded to ``T + 1`` elements so that reading a column hits ``T`` banks.
The epilogue's other loads (the residual, a per-channel scale) read in output order, coalesced.

Matched from the TIR: static shapes; every block inlined into the ones that write outputs; in
each of those (a kernel each) exactly one transposed load (its address moves by one element
along an output axis other than the innermost one, and not along the innermost) and every other
load coalesced or broadcast along the output's innermost axis; at least
``Config.min_tiles_per_multiprocessor`` tiles per SM.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import tvm
from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight.analysis import get_root_block

from tvm_fusion_hw.schedules.base.limits import GPULimits
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import (const_int, inline_all_but, is_plain_spatial, linear_coefficients,
                                                     tensor_loads, trivially_bound)
from tvm_fusion_hw.schedules.base.vector_lanes import dtype_bytes, flat_index, uses

from .tiles import TransposeConfig, TransposePart, TransposeProblem, TransposeTile, plan_tile

SBlockRV = s_tir.schedule.SBlockRV


class TiledTranspose(TiledScheduleRule):
    """Innermost-axis transposes through a shared ``T x T`` tile (see the module docstring).

    Returns ``None`` (the next rule takes it) for anything else: reductions, dynamic shapes, an
    output block with no transposed load or more than one, a strided or gathered load, outputs of
    fewer tiles than ``Config.min_tiles_per_multiprocessor`` per SM. Several outputs (ConvNeXt's
    block end writes the NCHW sum and its NHWC transpose) are a kernel each, a tile each.
    """

    #: the search bounds; the class lives beside the tile (:mod:`.tiles`)
    Config = TransposeConfig

    @staticmethod
    def match(sch, config, limits):
        """``(problem, *blocks)``: everything inlined into the output blocks, their axes found."""
        return _match_and_inline(sch, config, limits)

    @staticmethod
    def rank(problem, limits, config):
        """The one tile: a warp-wide square."""
        return [plan_tile(problem, limits, config)]

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply the tile to each output block (a kernel each)."""
        _schedule(sch, problem, tile, *blocks)


# ---- matching ----------------------------------------------------------------------------------
def _match_and_inline(  # pylint: disable=too-many-return-statements
    sch: s_tir.Schedule, config: TransposeConfig, limits: GPULimits
) -> Optional[Tuple]:
    """``(problem, *blocks)``: every block inlined into the blocks that write outputs, each of
    which must be a transpose (a kernel each); None otherwise."""
    func = sch.mod["main"]
    buffers = [p for p in func.params if hasattr(p.ty, "shape")]
    if any(const_int(d) is None for buf in buffers for d in buf.ty.shape):
        return None  # dynamic shapes
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    for block in sch.get_child_blocks(root):
        stmt = sch.get(block)
        if not stmt.iter_vars or any(iv.iter_type != tirx.IterVar.DataPar for iv in stmt.iter_vars):
            return None  # reductions, opaque blocks
        if any(sch.get(loop).kind != tirx.ForKind.SERIAL for loop in sch.get_loops(block)):
            return None  # already scheduled
    outputs = [b for b in sch.get_child_blocks(root)
               if any(w.source.same_as(p) for w in sch.get(b).writes for p in buffers)]
    if not outputs or inline_all_but(sch, root, outputs):
        return None  # a block that neither writes an output nor inlines
    parts = [_match_part(sch, block, buffers) for block in outputs]
    if None in parts:
        return None
    sizes = [dtype_bytes(b.dtype) for b in buffers]
    problem = TransposeProblem(tuple(parts), max(s or 4 for s in sizes))
    tile = plan_tile(problem, limits, config)
    if tile.blocks < config.min_tiles_per_multiprocessor * limits.profile.multiprocessor_count:
        return None
    return (problem, *outputs)


def _match_part(sch: s_tir.Schedule, block: SBlockRV, buffers) -> Optional[TransposePart]:
    """The transpose one output block computes, or None where it is not one."""
    stmt = sch.get(block)
    if not is_plain_spatial(stmt, stmt.body.buffer if isinstance(stmt.body, tirx.BufferStore) else None) \
            or not trivially_bound(sch, block) or not any(stmt.body.buffer.same_as(b) for b in buffers):
        return None
    shape = tuple(const_int(iv.dom.extent) for iv in stmt.iter_vars)
    ivars = [iv.var for iv in stmt.iter_vars]
    fast = max((i for i, e in enumerate(shape) if e > 1), default=None)
    if fast is None:
        return None
    strides = _strides(ivars, shape, tensor_loads(stmt.body.value))
    if strides is None:
        return None
    transposed = {name for name, (along_fast, _) in strides.items() if along_fast is None}
    if len(transposed) != 1:
        return None
    name = transposed.pop()
    slow = strides[name][1]
    if slow is None or slow == fast:
        return None
    reads = [r.source.name for r in stmt.reads]
    if reads.count(name) != 1:
        return None
    load = next(ld for ld in tensor_loads(stmt.body.value) if ld.source.name == name)
    along_fast = [d for d, index in enumerate(load.indices) if uses([index], [ivars[fast]])]
    if len(along_fast) != 1:
        return None
    return TransposePart(shape, fast, slow, reads.index(name), along_fast[0])


def _strides(ivars: List[tirx.Var], shape: Tuple[int, ...], loads) -> Optional[dict]:
    """Per loaded buffer, ``(coalesced, unit_axis)``: ``coalesced`` True when the load moves by one
    element along the output's innermost axis, False when it does not move along it, None when it
    moves by another stride (then ``unit_axis`` is the output axis it moves along by one element);
    None for a load that is not linear in the output's axes, or two loads of one buffer that
    differ (a gather)."""
    analyzer = sym.Analyzer()
    for var, extent in zip(ivars, shape):
        analyzer.bind(var, tvm.ir.Range(0, extent))
    fast = max(i for i, e in enumerate(shape) if e > 1)
    found: dict = {}
    for load in loads:
        flat = flat_index(load)
        if flat is None:
            return None
        coeffs = linear_coefficients(analyzer.simplify(flat), ivars)
        if coeffs is None:
            return None
        steps = coeffs[:-1]
        unit = next((i for i, (s, e) in enumerate(zip(steps, shape)) if s == 1 and e > 1), None)
        kind = True if steps[fast] == 1 else False if steps[fast] == 0 else None
        if kind is None and unit is None:
            return None  # strided along every axis: a gather this rule does not tile
        entry = (kind, unit)
        if found.setdefault(load.source.name, entry) != entry:
            return None
    return found


# ---- the schedule ------------------------------------------------------------------------------
def _schedule(sch: s_tir.Schedule, problem: TransposeProblem, tile: TransposeTile, *blocks: SBlockRV) -> None:
    """Each output block its own kernel (:func:`_schedule_part`)."""
    for part, block in zip(problem.parts, blocks):
        _schedule_part(sch, part, tile, block)


def _schedule_part(sch: s_tir.Schedule, part: TransposePart, tile: TransposeTile, block: SBlockRV) -> None:
    """``[blockIdx: the other axes x slow tiles x fast tiles, threadIdx.y: rows, serial,
    threadIdx.x: the fast axis]``, the transposed input staged per tile in shared memory, read
    from global memory along its own contiguous axis."""
    loops = sch.get_loops(block)
    fast_out, fast_in = sch.split(loops[part.fast], [None, tile.size])
    slow_out, slow_in = sch.split(loops[part.slow], [None, tile.size])
    others = [loop for i, loop in enumerate(loops) if i not in (part.fast, part.slow)]
    row, step = sch.split(slow_in, [tile.rows, None])
    sch.reorder(*others, slow_out, fast_out, row, step, fast_in)
    bx = sch.fuse(*others, slow_out, fast_out)
    sch.bind(bx, "blockIdx.x")
    sch.bind(row, "threadIdx.y")
    sch.bind(fast_in, "threadIdx.x")
    staged = sch.cache_read(block, part.read_index, "shared", consumer_blocks=[block])
    sch.compute_at(staged, bx, preserve_unit_loops=True)
    inner = sch.get_loops(staged)[1:]
    copy = sch.fuse(*inner) if len(inner) > 1 else inner[0]
    _, ty, tx = sch.split(copy, [None, tile.rows, tile.size])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    # A warp of the output block reads down a column of the tile (consecutive elements of the
    # output's fast axis): rows of T + 1 elements put those in T different banks.
    sch.storage_align(staged, 0, axis=part.padded_dim, factor=tile.size, offset=1)


__all__ = ["TiledTranspose"]
