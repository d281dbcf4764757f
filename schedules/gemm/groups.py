"""Grouped convolution as a batch of GEMMs: split the output channel into (group, channel).

TOPI's grouped conv reads input channel ``ff // (F / G) * (C / G) + rc`` for output channel
``ff``: ``ff`` indexes all three buffers, so dlight's normalisation (an iterator in A, B and C is
the batch ``S``) finds no ``J`` and gives up, and every grouped convolution (ResNeXt, RegNet) fell
to dlight's ``GeneralReduction``. Splitting ``ff`` into ``g = ff // (F / G)`` and
``o = ff % (F / G)`` makes ``g`` the batch (in A, B, C) and ``o`` the GEMM's ``J`` (in B and C):
``C[g, pixels, o] += A[g, pixels, (rc, ry, rx)] * B[g, o, (rc, ry, rx)]``, one GEMM per group.
"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import get_index_map, get_reduction_blocks

from tvm_fusion_hw.schedules.base.tir_match import const_int


def _floor_divs(expr) -> Iterator[tirx.FloorDiv]:
    """Every ``a // b`` inside an index expression (sums, products, divisions of iterators)."""
    if isinstance(expr, tirx.FloorDiv):
        yield expr
    if isinstance(expr, (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod)):
        yield from _floor_divs(expr.a)
        yield from _floor_divs(expr.b)


def _group_axis(stmt: s_tir.SBlock) -> Optional[Tuple[int, int]]:
    """``(position, channels per group)`` of the spatial iterator that some read indexes only
    divided by a constant (the group's channel count), or None."""
    spatial = [(n, iv) for n, iv in enumerate(stmt.iter_vars) if iv.iter_type == tirx.IterVar.DataPar]
    for region in stmt.reads:
        for rng in region.region:
            for div in _floor_divs(rng.min):
                found = next(((n, iv) for n, iv in spatial if div.a.same_as(iv.var)), None)
                width = const_int(div.b)
                extent = const_int(found[1].dom.extent) if found else None
                if width is not None and extent is not None and 1 < width < extent and extent % width == 0:
                    return found[0], width
    return None


def split_groups(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its reduction's grouped output-channel iterator split into (group, channel in
    group) and the indices simplified (``(g * F/G + o) // (F/G)`` to ``g``); ``func`` itself where
    dlight already normalises the reduction, or it has no such iterator."""
    sch = s_tir.Schedule(func)
    try:
        reductions = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    except Exception:  # pylint: disable=broad-except
        return func
    if not reductions or get_index_map(sch.get(reductions[0])) is not None:
        return func
    axis = _split_group_axis(sch, reductions[0])
    if axis is None:
        return func
    return _fold_group_division(sch.mod["main"], sch.get(reductions[0]), *axis)


def _fold_group_division(func: tirx.PrimFunc, block: s_tir.SBlock, position: int, width: int) -> tirx.PrimFunc:
    """``(g * width + o) // width`` as ``g`` and ``(g * width + o) % width`` as ``o`` (``o`` in
    ``[0, width)``), for the split iterators at ``position`` of ``block``. A targeted rewrite, not
    TVM's simplifier: that would also turn unit loops' bindings into constants, which dlight's
    reindexing refuses."""
    group, channel = block.iter_vars[position].var, block.iter_vars[position + 1].var

    def split_of(expr) -> bool:  # g * width + o
        return (isinstance(expr, tirx.Add) and expr.b.same_as(channel) and isinstance(expr.a, tirx.Mul)
                and expr.a.a.same_as(group) and const_int(expr.a.b) == width)

    def fold(expr):
        if isinstance(expr, (tirx.FloorDiv, tirx.FloorMod)) and const_int(expr.b) == width and split_of(expr.a):
            return group if isinstance(expr, tirx.FloorDiv) else channel
        return expr

    return tvm_ffi.structural_map(func, ((tirx.FloorDiv, tirx.FloorMod), fold))


def _split_group_axis(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> Optional[Tuple[int, int]]:
    """Rewrite ``block``'s grouped output-channel iterator as (group, channel in group): its
    ``(position, channels per group)``, or None (the block unchanged) where it has none or the
    schedule cannot remap it."""
    axis = _group_axis(sch.get(block))
    if axis is None:
        return None
    position, width = axis

    def remap(*iters):
        head, ff, tail = iters[:position], iters[position], iters[position + 1:]
        return (*head, ff // width, ff % width, *tail)

    try:
        ndim = len(sch.get(block).iter_vars)
        sch.transform_block_layout(block, tirx.IndexMap.from_func(remap, ndim=ndim))
    except RuntimeError:  # ScheduleError: the block's loops are not its own
        return None
    return axis
