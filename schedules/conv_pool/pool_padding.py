"""A padded pool after a conv, rewritten so that ConvPool can keep the conv tile in registers.

A ResNet stem pools its conv output with a 3x3/2 max-pool padded by one: the first window of every
row starts one row above the conv output. Fused, TVM reads the conv output under the pool's padding
guard, and ``compute_at`` clamps the conv rows an edge thread computes to the conv's domain: the
thread's register tile would start at a per-thread ``max(0, ...)`` offset, which nvcc can only index
in local memory. :func:`unpad_pool` moves the padding into the conv instead: the conv, and its
element-wise epilogue, are computed over the pool's padded plane (its input padded further by the
conv's stride times the pool's padding), so a window never starts outside the conv's domain. The
pool's guard stays, as a ``Select`` (TVM narrows a read region under an ``if_then_else``, which
would clamp the register tile again): the rows the conv computes in the padding (from zero input)
are never chosen.
The same values are computed (the numerics tests run both), the padding rows cost a few percent
more conv work (2 of 114 rows for a ResNet stem). A ceil-mode pool, whose last window hangs over
the conv output's end, is rewritten the same way (no shift): otherwise TVM predicates every
unrolled FMA of an edge thread's conv rows.

Taken only as a whole: the data's padding block, the conv, element-wise epilogue blocks that read
nothing else per pixel (a bias, BatchNorm's per-channel scale), the pool's padding block, the pool
and its tail (an average's division), all of ``[N, C, H, W]``; anything else is returned
unchanged (and ConvPool then declines the padded pool).
"""

from __future__ import annotations

from typing import List, Optional

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.ir import TensorLoad
from tvm.s_tir.dlight.analysis import get_root_block

from tvm_fusion_hw.schedules.base.tir_match import const_int, is_reduction, linear_coefficients, tensor_loads

SBlockRV = s_tir.schedule.SBlockRV
_INT = "int64"
_IF_THEN_ELSE = ir.Op.get("prim.if_then_else")


def pool_padding_of(block: s_tir.SBlock, source: tirx.Buffer) -> Optional[List[int]]:
    """``[P, P']``: how far the pool's padding block ``block`` reads ``source`` (``[N, C, H, W]``)
    above and left of its own position (``source[n, c, y - P, x - P']``); None if it reads it
    otherwise."""
    loads = [ld for ld in tensor_loads(block.body) if ld.source.same_as(source)]
    ivars = [iv.var for iv in block.iter_vars]
    if not loads or len(ivars) != 4:
        return None
    found = set()
    for ld in loads:
        coeffs = [linear_coefficients(i, ivars) for i in ld.indices]
        if len(coeffs) != 4 or None in coeffs:
            return None
        for axis, cf in enumerate(coeffs):
            if cf[:-1] != [int(axis == k) for k in range(4)] or (axis < 2 and cf[-1] != 0):
                return None
        found.add((-coeffs[2][-1], -coeffs[3][-1]))
    return list(found.pop()) if len(found) == 1 else None


def unpad_pool(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its conv computed over the padded pool's plane (see the module docstring),
    or ``func`` itself when it holds no padded pool after a conv in the form described there.

    Runs on every PrimFunc the rule is offered (ConvPool's ``prepare``): any function it cannot
    read is returned as it is, never an error."""
    try:
        return _unpad_pool(func)
    except (RuntimeError, IndexError, TypeError, ValueError):  # ScheduleError, TVMError among them
        return func


def _unpad_pool(func: tirx.PrimFunc) -> tirx.PrimFunc:  # pylint: disable=too-many-locals
    """:func:`unpad_pool`, unguarded."""
    found = _find(func)
    if found is None:
        return func
    sch, data_pad, conv, chain, pool_pad, padding = found
    conv_block = sch.get(conv)
    plane = [const_int(d) for d in sch.get(pool_pad).writes[0].source.shape[2:]]
    strides = _conv_strides(conv_block)
    if strides is None:
        return func
    shift = [p * s for p, s in zip(padding, strides)]

    # The buffers of the conv and its epilogue grow to the pool's plane, the data's padding by the
    # rows and columns the new conv rows read.
    pad_buffer = sch.get(data_pad).writes[0].source
    kernel_reach = _kernel_reach(conv_block, pad_buffer)
    if kernel_reach is None:
        return func
    pad_plane = [max(const_int(old) + sh, (n - 1) * s + reach)
                 for old, sh, n, s, reach in zip(pad_buffer.shape[2:], shift, plane, strides, kernel_reach)]
    resized = [(pad_buffer, pad_plane)] + [(sch.get(b).writes[0].source, plane) for b in [conv] + chain]
    replaced = [(old, tirx.decl_buffer([old.shape[0], old.shape[1]] + [tirx.const(e, _INT) for e in size],
                                       old.dtype, old.name))
                for old, size in resized]

    # Loops and iterators of the resized blocks: their rows and columns span the new planes.
    extents: List = []  # (loop or iterator variable, new extent)
    for block, size in [(data_pad, pad_plane)] + [(b, plane) for b in [conv] + chain]:
        loops = sch.get_loops(block)
        stmt = sch.get(block)
        for axis in (2, 3):
            extents.append((sch.get(loops[axis]).loop_var, size[axis - 2]))
            extents.append((stmt.iter_vars[axis].var, size[axis - 2]))

    def extent_of(var) -> Optional[int]:
        return next((e for v, e in extents if v.same_as(var)), None)
    data_pad_stmt, pool_pad_stmt = sch.get(data_pad), sch.get(pool_pad)
    epilogue_out = sch.get(chain[-1]).writes[0].source if chain else conv_block.writes[0].source
    pad_vars = [data_pad_stmt.iter_vars[axis].var for axis in (2, 3)]

    def shift_data_pad(block: s_tir.SBlock) -> s_tir.SBlock:
        def sub(var):
            for pv, sh in zip(pad_vars, shift):
                if var.same_as(pv):
                    return var - tirx.const(sh, _INT)
            return var
        mapping = ((tirx.Var,), sub)
        store = block.body  # the stored value moves, not where it is stored
        body = tirx.BufferStore(store.buffer, tvm_ffi.structural_map(store.value, mapping), store.indices)
        return _rebuild(block, body=body, reads=tvm_ffi.structural_map(list(block.reads), mapping))

    def unshift_pool_pad(block: s_tir.SBlock) -> s_tir.SBlock:
        def load(ld):
            if isinstance(ld, TensorLoad) and ld.source.same_as(epilogue_out):
                idx = list(ld.indices)
                idx[2], idx[3] = idx[2] + tirx.const(padding[0], _INT), idx[3] + tirx.const(padding[1], _INT)
                return tirx.BufferLoad(ld.source, idx)
            return ld
        def select(call):  # every position it guards now exists: no narrowed read region
            return tirx.Select(*call.args) if call.op.same_as(_IF_THEN_ELSE) else call

        mapping = (((TensorLoad,), load), ((ir.Call,), select))
        reads = [ir.TensorRegion(r.source, [r.region[0], r.region[1],
                                            ir.Range.from_min_extent(r.region[2].min + padding[0], r.region[2].extent),
                                            ir.Range.from_min_extent(r.region[3].min + padding[1], r.region[3].extent)],
                                 r.ty)
                 if r.source.same_as(epilogue_out) else r for r in block.reads]
        return _rebuild(block, body=tvm_ffi.structural_map(block.body, mapping), reads=reads)

    def blocks(block):
        if block.same_as(data_pad_stmt):
            return shift_data_pad(block)
        if block.same_as(pool_pad_stmt):
            return unshift_pool_pad(block)
        return block

    out = tvm_ffi.structural_map(func, ((s_tir.SBlock,), blocks))
    out = tvm_ffi.structural_map(out, ((tirx.Buffer,), lambda b: next(
        (new for old, new in replaced if b.same_as(old)), b)))

    def loops(node):
        if isinstance(node, tirx.For) and extent_of(node.loop_var) is not None:
            return tirx.For(node.loop_var, node.min, tirx.const(extent_of(node.loop_var), _INT), node.kind,
                            node.body, node.thread_binding, node.annotations)
        if isinstance(node, tirx.IterVar) and extent_of(node.var) is not None:
            return tirx.IterVar(ir.Range.from_min_extent(node.dom.min, tirx.const(extent_of(node.var), _INT)),
                                node.var, node.iter_type)
        return node

    return tvm_ffi.structural_map(out, ((tirx.For, tirx.IterVar), loops))


def conv_extends(producer: tirx.PrimFunc) -> bool:
    """Whether :func:`unpad_pool` can move a pool's padding into ``producer`` (a conv PrimFunc,
    before fusion): the data's padding block, the conv and a per-pixel epilogue, nothing else."""
    try:
        return _conv_extends(producer)
    except (RuntimeError, IndexError, TypeError, ValueError):  # asked of any conv PrimFunc: never an error
        return False


def _conv_extends(producer: tirx.PrimFunc) -> bool:
    """:func:`conv_extends`, unguarded."""
    try:
        sch = s_tir.Schedule(producer)
        children = sch.get_child_blocks(get_root_block(sch))
    except Exception:  # pylint: disable=broad-except
        return False
    reductions = [b for b in children if is_reduction(sch.get(b))]
    if len(reductions) != 1:
        return False
    conv = reductions[0]
    data_pads = [p for p in sch.get_producers(conv) if not is_reduction(sch.get(p))]
    if len(data_pads) != 1 or len(sch.get(data_pads[0]).iter_vars) != 4:
        return False
    chain, block = 0, conv
    while sch.get_consumers(block):
        consumers = sch.get_consumers(block)
        if len(consumers) != 1 or not _per_pixel_epilogue(sch.get(consumers[0]), sch.get(block).writes[0].source):
            return False
        block, chain = consumers[0], chain + 1
    return len(children) == 2 + chain


def _rebuild(block: s_tir.SBlock, body=None, reads=None) -> s_tir.SBlock:
    return s_tir.SBlock(block.iter_vars, reads if reads is not None else block.reads, block.writes,
                        block.name_hint, body if body is not None else block.body, block.init,
                        block.alloc_buffers, block.match_buffers, block.annotations)


def _conv_strides(conv: s_tir.SBlock) -> Optional[List[int]]:
    """The conv's strides along rows and columns, from its data read ``[n, rc, y*s + ..., x*s' + ...]``."""
    ivars = [iv.var for iv in conv.iter_vars]
    for ld in tensor_loads(conv.body):
        if ld.source.same_as(conv.writes[0].source) or len(ld.indices) != 4:
            continue
        coeffs = [linear_coefficients(i, ivars) for i in ld.indices]
        if None not in coeffs and coeffs[2][2] > 0 and coeffs[3][3] > 0:
            return [coeffs[2][2], coeffs[3][3]]
    return None


def _kernel_reach(conv: s_tir.SBlock, data: tirx.Buffer) -> Optional[List[int]]:
    """Rows and columns of ``data`` one conv output reads: ``(K - 1) * dilation + 1``."""
    ivars = [iv.var for iv in conv.iter_vars]
    extents = [const_int(iv.dom.extent) for iv in conv.iter_vars]
    for ld in tensor_loads(conv.body):
        if ld.source.same_as(data):
            coeffs = [linear_coefficients(i, ivars) for i in ld.indices]
            if None in coeffs or len(ivars) != 7 or len(coeffs) != 4:
                return None
            return [(extents[5] - 1) * coeffs[2][5] + 1, (extents[6] - 1) * coeffs[3][6] + 1]
    return None


def _find(func: tirx.PrimFunc):  # pylint: disable=too-many-return-statements
    """``(schedule, data padding, conv, epilogue blocks in order, pool padding, [P, P'])`` of
    ``func`` (the blocks of that schedule of it), or None."""
    try:
        sch = s_tir.Schedule(func)
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    children = sch.get_child_blocks(root)
    reductions = [b for b in children if is_reduction(sch.get(b))]
    if len(reductions) != 2:
        return None
    conv, pool = reductions
    if len(sch.get(conv).iter_vars) != 7:  # n, f, y, x, rc, ry, rx
        return None
    pool_reads = [r.source for r in sch.get(pool).reads if not r.source.same_as(sch.get(pool).writes[0].source)]
    producers = sch.get_producers(pool)
    if len(pool_reads) != 1 or len(producers) != 1:
        return None
    pool_pad = producers[0]
    chain, block = [], conv
    while True:  # the epilogue: one consumer after another, up to the pool's padding
        consumers = sch.get_consumers(block)
        if len(consumers) != 1:
            return None
        if sch.get(consumers[0]).same_as(sch.get(pool_pad)):
            break
        block = consumers[0]
        if not _per_pixel_epilogue(sch.get(block), sch.get(chain[-1] if chain else conv).writes[0].source):
            return None
        chain.append(block)
    source = sch.get(chain[-1] if chain else conv).writes[0].source
    padding = pool_padding_of(sch.get(pool_pad), source)
    plane = [const_int(d) for d in sch.get(pool_pad).writes[0].source.shape[2:]]
    if padding is None or plane == [const_int(d) for d in source.shape[2:]]:
        return None  # no padding, and no ceil-mode overhang either
    data_pads = [p for p in sch.get_producers(conv) if not is_reduction(sch.get(p))]
    if len(data_pads) != 1 or len(sch.get(data_pads[0]).iter_vars) != 4 \
            or not isinstance(sch.get(data_pads[0]).body, tirx.BufferStore):
        return None
    tail = sch.get_consumers(pool)  # an average's division
    if len(tail) > 1 or any(is_reduction(sch.get(b)) for b in tail):
        return None
    if len(children) != 4 + len(chain) + len(tail):  # nothing else in the function
        return None
    return sch, data_pads[0], conv, chain, pool_pad, padding


def _per_pixel_epilogue(block: s_tir.SBlock, previous: tirx.Buffer) -> bool:
    """``block`` is element-wise over ``[N, C, H, W]``: it reads ``previous`` at its own position and
    anything else without its row or column (a bias, a per-channel scale)."""
    if is_reduction(block) or len(block.iter_vars) != 4 or len(block.writes) != 1:
        return False
    ivars = [iv.var for iv in block.iter_vars]
    for ld in tensor_loads(block.body):
        coeffs = [linear_coefficients(i, ivars) for i in ld.indices]
        if None in coeffs:
            return False
        if ld.source.same_as(previous):
            if len(coeffs) != 4:
                return False
            if [c[:-1] for c in coeffs] != [[int(a == k) for k in range(4)] for a in range(4)] or any(
                    c[-1] for c in coeffs):
                return False
        elif any(c[2] or c[3] for c in coeffs):
            return False
    return True
