"""A schedule rule for small-window reductions: average and max pools, short column sums.

A pool with a window (3x3 stride 1, 2x2 stride 2) is a reduction of a few elements per output,
and there are many outputs. dlight's ``Reduction`` and ``GeneralReduction`` take the average
pools (their divide is an epilogue) and give each output a block whose threads split the window:
at most 9 of them busy, and a launch of one block per output element (PoolFormer's token mixer,
Inception's branch pools, ResNet-D's average-pool shortcut). ``Fallback`` takes max pools with
one output per thread, but keeps the running maximum in global memory.

This rule gives each thread whole outputs: the spatial axes fused and split over ``[blockIdx,
threadIdx, k]`` (the element-wise rule's grid, :mod:`.tiles`), the window reduced serially in a
register (its loops unrolled), and the element-wise epilogue (the average's divide, PoolFormer's
``pool(x) - x`` and layer scale, a residual add) applied by the same thread before the one store.

Matched from the TIR, not from names: one reduction block, every other block inlined into it or
into the one block that writes the output (which must then be computable per output element of
the reduction); static shapes; the reduction's iterators its spatial axes then its reduced ones,
writing ``out[s0, s1, ...]``; at most ``Config.max_window`` reduced elements; and every load of
the reduction coalesced: its address moves by at most ``Config.max_stride`` elements between
neighbouring outputs (a global pool, a row sum along the innermost axis, a transposed read are
not windows and are left to the next rule).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import tvm
from tvm import s_tir, sym, tirx

from tvm_fusion_hw.schedules.base.limits import GPULimits
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import (const_int, inline_all_but, is_reduction, single_reduction,
                                                     tensor_loads, trivially_bound)
from tvm_fusion_hw.schedules.base.vector_lanes import dtype_bytes, flat_index, uses
from tvm_fusion_hw.schedules.elementwise.tiles import choose_plan

from .tiles import WindowConfig, WindowPlan, WindowProblem

SBlockRV = s_tir.schedule.SBlockRV


class WindowReduction(TiledScheduleRule):
    """Reductions of a small window per output (pools), one output per thread with its epilogue.

    Returns ``None`` (the next rule takes it) for more than one reduction, dynamic shapes, a
    window of more than ``Config.max_window`` elements, an uncoalesced load, fewer outputs than a
    warp, or an epilogue that is not computable per output of the reduction.
    """

    #: the search bounds; the class lives beside the problem (:mod:`.tiles`)
    Config = WindowConfig
    stages_in_shared = False  # no shared memory

    # ---- the rule: TiledScheduleRule calls these (one plan: no tiles to rank) -------------------
    @staticmethod
    def match(sch, config, limits):
        """``(problem, reduction, epilogue or None)``, every other block inlined."""
        return _match_and_inline(sch, config, limits)

    @staticmethod
    def rank(problem, limits, config):
        """The one plan: the element-wise grid over the outputs."""
        return [WindowPlan(choose_plan(problem.grid_problem, limits, config), math.prod(problem.window))]

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply the plan to the reduction and its epilogue."""
        _schedule(sch, problem, tile, *blocks)


# ---- matching ----------------------------------------------------------------------------------
def _match_and_inline(  # pylint: disable=too-many-return-statements,too-many-locals
    sch: s_tir.Schedule, config: WindowConfig, limits: GPULimits
) -> Optional[Tuple[WindowProblem, SBlockRV, Optional[SBlockRV]]]:
    func = sch.mod["main"]
    buffers = [p for p in func.params if hasattr(p.ty, "shape")]
    if any(const_int(d) is None for buf in buffers for d in buf.ty.shape):
        return None  # dynamic shapes
    found = single_reduction(sch)
    if found is None:
        return None
    root, blocks, red = found
    if sch.get(red).init is None:
        return None
    for block in blocks:
        if any(sch.get(loop).kind != tirx.ForKind.SERIAL for loop in sch.get_loops(block)):
            return None  # already scheduled
    if not trivially_bound(sch, red):
        return None
    stmt = sch.get(red)
    kinds = [iv.iter_type for iv in stmt.iter_vars]
    spatial = kinds.index(tirx.IterVar.CommReduce)
    if spatial == 0 or any(k != tirx.IterVar.CommReduce for k in kinds[spatial:]):
        return None  # spatial axes first, then only reduced ones
    if any(k != tirx.IterVar.DataPar for k in kinds[:spatial]):
        return None
    ivars = [iv.var for iv in stmt.iter_vars]
    store = stmt.body
    if not isinstance(store, tirx.BufferStore) or len(store.indices) != spatial or not all(
            isinstance(i, tirx.Var) and i.same_as(v) for i, v in zip(store.indices, ivars)):
        return None
    shape = tuple(const_int(iv.dom.extent) for iv in stmt.iter_vars[:spatial])
    window = tuple(const_int(iv.dom.extent) for iv in stmt.iter_vars[spatial:])
    if math.prod(window) > config.max_window or math.prod(shape) < limits.profile.warp_size:
        return None

    # Producers (the padding, a prologue) into the reduction, the epilogue's steps into its last.
    left = inline_all_but(sch, root, [red])
    if len(left) > 1:
        return None
    epilogue = left[0] if left else None
    if epilogue is None and not any(store.buffer.same_as(b) for b in buffers):
        return None
    if epilogue is not None and is_reduction(sch.get(epilogue)):
        return None

    stmt = sch.get(red)  # with the producers inlined
    ivars = [iv.var for iv in stmt.iter_vars]
    loads = [ld for ld in tensor_loads(stmt.body.value) if not ld.source.same_as(stmt.body.buffer)]
    moving = _coalesced_loads(ivars, shape, tuple(const_int(iv.dom.extent) for iv in stmt.iter_vars), loads,
                              config.max_stride)
    if moving is None:
        return None
    sizes = [dtype_bytes(store.buffer.dtype)] + [dtype_bytes(ld.source.dtype) for ld in loads]
    problem = WindowProblem(
        shape=shape,
        window=window,
        element_bytes=max(s or 4 for s in sizes),
        streams=len({str(ld) for ld, m in zip(loads, moving) if m}),
        broadcasts=len({str(ld) for ld, m in zip(loads, moving) if not m}),
        epilogue=epilogue is not None,
    )
    return problem, red, epilogue


def _coalesced_loads(ivars, shape, extents, loads, max_stride):
    """Per load, whether it moves with the innermost output axis of extent > 1 (by at most
    ``max_stride`` elements per output); None when one moves further or not linearly."""
    inner = max((i for i, extent in enumerate(shape) if extent > 1), default=None)
    if inner is None:
        return None
    analyzer = sym.Analyzer()
    for var, extent in zip(ivars, extents):
        analyzer.bind(var, tvm.ir.Range(0, extent))
    moving = []
    for load in loads:
        flat = flat_index(load)
        if flat is None:
            return None
        flat = analyzer.simplify(flat)
        if not uses(flat, [ivars[inner]]):
            moving.append(False)
            continue
        coeffs = sym.detect_linear_equation(flat, [ivars[inner]])
        stride = const_int(analyzer.simplify(coeffs[0])) if len(coeffs) == 2 else None
        if stride is None or abs(stride) > max_stride or uses(coeffs[1], [ivars[inner]]):
            return None
        moving.append(True)
    return moving


# ---- the schedule ------------------------------------------------------------------------------
def _schedule(sch: s_tir.Schedule, problem: WindowProblem, plan: WindowPlan, red: SBlockRV,
              epilogue: Optional[SBlockRV]) -> None:
    """``[blockIdx, threadIdx, k]`` over the fused outputs, the window unrolled inside, the
    accumulator in a register and the epilogue (or the store) at the same thread."""
    loops = sch.get_loops(red)
    spatial, window = loops[: len(problem.shape)], loops[len(problem.shape):]
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    if plan.outputs_per_thread > 1:
        bx, k, tx = sch.split(fused, factors=[None, plan.outputs_per_thread, plan.threads])
        sch.reorder(bx, tx, k)
        anchor = k
    else:
        bx, tx = sch.split(fused, factors=[None, plan.threads])
        anchor = tx
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    for loop in window:
        sch.unroll(loop)
    if epilogue is None:
        epilogue = sch.cache_write(red, 0, "local")  # the output written once, after the window
        sch.reverse_compute_at(epilogue, anchor, preserve_unit_loops=False)
    else:
        sch.reverse_compute_at(epilogue, anchor, preserve_unit_loops=False)
        sch.set_scope(red, 0, "local")


__all__ = ["WindowReduction"]
