"""How ConvPool (:mod:`.conv_pool`) recognises its group in TIR: the fused PrimFunc, and the
conv and pool PrimFuncs before fusion (for the fusion policy).

:func:`match_conv_pool_group` finds the padding, the conv, the pool and the pool's tail in a
schedule of the fused PrimFunc and inlines every other block; :func:`pair_problem` judges the two
PrimFuncs apart. Both give the :class:`~.conv_pool_tiles.ConvPoolProblem` the tile model ranks.
The pattern is described in :mod:`.conv_pool`; iterators are compared by position in the block,
never by name.
"""

from __future__ import annotations

from typing import Optional, Tuple

from tvm import s_tir, tirx
from tvm.ir import TensorLoad
from tvm.runtime import DataType
from tvm.s_tir.dlight.analysis import get_root_block

from tvm_fusion_hw.schedules.base.tir_match import (
    const_int,
    inline_all_but,
    is_reduction,
    linear_coefficients,
    mac_operands,
    only_coefficients,
    padding_producer,
    reduction_pair,
    tensor_loads,
    trivially_bound,
    var_position,
)

from .pool_padding import conv_extends
from .tiles import ConvPoolConfig, ConvPoolProblem

SBlockRV = s_tir.schedule.SBlockRV


def match_conv_pool_group(  # pylint: disable=too-many-return-statements,too-many-branches
    sch: s_tir.Schedule, config: ConvPoolConfig
) -> Optional[Tuple[ConvPoolProblem, Optional[SBlockRV], SBlockRV, SBlockRV, Optional[SBlockRV]]]:
    """Find the conv, its padding producer, the pool and the pool's tail; inline all other blocks.

    Returns ``(problem, pad, conv, pool, tail)`` (``pad``/``tail`` may be None) or None.
    """
    pair = reduction_pair(sch)
    if pair is None:
        return None
    root, conv, pool = pair
    conv_shape = _match_conv(sch, conv, config)
    if conv_shape is None:
        return None
    conv_stmt = sch.get(conv)
    data = conv_stmt.reads[conv_shape[-2]].source
    weight = conv_stmt.reads[conv_shape[-1]].source

    # The data may come from one spatial block (the padding); the weights from none.
    matched, pad = padding_producer(sch, conv, data, weight)
    if not matched:
        return None
    # Inline every other block: prologues into the padding, the epilogue chain into the pool,
    # all but the last step of the tail into its last step.
    rest = inline_all_but(sch, root, [conv, pool] + ([pad] if pad is not None else []))
    consumers = sch.get_consumers(conv)
    if len(consumers) != 1 or not sch.get(consumers[0]).same_as(sch.get(pool)):
        return None
    tail = None
    if len(rest) == 1:
        pool_consumers = sch.get_consumers(pool)
        if len(pool_consumers) != 1 or not sch.get(pool_consumers[0]).same_as(sch.get(rest[0])):
            return None
        if is_reduction(sch.get(rest[0])):
            return None
        tail = rest[0]
    elif rest:
        return None

    pooled = _match_pool(sch, pool, sch.get(conv).writes[0].source, config)
    if pooled is None or any(pooled[3]) or pooled[4]:  # a padding or overhang unpad_pool left
        return None
    return _problem(conv_shape, pooled, data), pad, conv, pool, tail


def pair_problem(  # pylint: disable=too-many-return-statements
    producer: tirx.PrimFunc, consumer: tirx.PrimFunc, config: ConvPoolConfig
) -> Optional[ConvPoolProblem]:
    """The problem ConvPool would see in ``producer`` fused with ``consumer``, or None when it
    would not take them (see :func:`.conv_pool.supports_pair`)."""
    if not isinstance(producer, tirx.PrimFunc) or not isinstance(consumer, tirx.PrimFunc):
        return None
    try:
        sch = s_tir.Schedule(producer)
        convs = [b for b in sch.get_child_blocks(get_root_block(sch)) if is_reduction(sch.get(b))]
        if len(convs) != 1:
            return None
        conv_shape = _match_conv(sch, convs[0], config)
        if conv_shape is None:
            return None
        data = sch.get(convs[0]).reads[conv_shape[-2]].source
        sch = s_tir.Schedule(consumer)
        root = get_root_block(sch)
        pools = [b for b in sch.get_child_blocks(root) if is_reduction(sch.get(b))]
        if len(pools) != 1:
            return None
        for block in sch.get_child_blocks(root):  # a padding block goes into the pool's reads
            if not sch.get(block).same_as(sch.get(pools[0])):
                try:
                    sch.compute_inline(block)
                except RuntimeError:  # ScheduleError, InternalError
                    pass
        pool = sch.get(pools[0])
        internal = list(sch.get(root).alloc_buffers) + [pool.writes[0].source]
        inputs = []  # the buffers the pool reads that come from outside the function
        for load in tensor_loads(pool.body):
            if not any(load.source.same_as(b) for b in internal + inputs):
                inputs.append(load.source)
        if len(inputs) != 1:
            return None
        pooled = _match_pool(sch, pools[0], inputs[0], config)
    except RuntimeError:  # ScheduleError, InternalError
        return None
    if pooled is None or ((any(pooled[3]) or pooled[4]) and not conv_extends(producer)):
        return None
    return _problem(conv_shape, pooled, data)


def _problem(conv_shape: tuple, pooled: tuple, data: tirx.Buffer) -> ConvPoolProblem:
    """The problem from ``_match_conv``'s and ``_match_pool``'s findings and the conv's input."""
    batch, out_ch, in_ch, kernel, stride, dilation, _, data_idx, weight_idx = conv_shape
    pooled_hw, window, pool_stride, _, _, kind = pooled
    return ConvPoolProblem(
        batch=batch,
        in_channels=in_ch,
        out_channels=out_ch,
        pooled=pooled_hw,
        kernel=kernel,
        stride=stride,
        dilation=dilation,
        window=window,
        pool_stride=pool_stride,
        pool=kind,
        dtype_bytes=max(1, DataType(str(data.dtype)).bits // 8),
        data_read_index=data_idx,
        weight_read_index=weight_idx,
    )


def _match_conv(  # pylint: disable=too-many-locals,too-many-return-statements
    sch: s_tir.Schedule, conv: SBlockRV, config: ConvPoolConfig
) -> Optional[tuple]:
    """Match ``out[n,f,y,x] += data[n, rc, y*sh + ry*dh, x*sw + rx*dw] * weight[f, rc, ry, rx]``.

    Returns ``(batch, out_channels, in_channels, kernel, stride, dilation, conv_hw, data read
    index, weight read index)`` or None. Iterators are compared by position in the block.
    """
    block = sch.get(conv)
    if not trivially_bound(sch, conv):
        return None
    ivars = [iv.var for iv in block.iter_vars]
    ext = [const_int(iv.dom.extent) for iv in block.iter_vars]
    kinds = [iv.iter_type for iv in block.iter_vars]
    if kinds != [tirx.IterVar.DataPar] * 4 + [tirx.IterVar.CommReduce] * 3:
        return None
    n, f, y, x, rc, ry, rx = range(7)
    store = block.body
    if [var_position(i, ivars) for i in store.indices] != [n, f, y, x]:
        return None
    loads = mac_operands(block)
    if loads is None or len(block.writes) != 1:
        return None
    reads = [r.source for r in block.reads]
    for weight, data in (loads, loads[::-1]):
        if [var_position(i, ivars) for i in weight.indices] != [f, rc, ry, rx]:
            continue
        if [const_int(d) for d in weight.source.shape] != [ext[f], ext[rc], ext[ry], ext[rx]]:
            continue
        coeffs = [linear_coefficients(i, ivars) for i in data.indices]
        if not (only_coefficients(coeffs[0], {n: 1}) and only_coefficients(coeffs[1], {rc: 1})):
            continue
        if not (
            only_coefficients(coeffs[2], {y: None, ry: None})
            and only_coefficients(coeffs[3], {x: None, rx: None})
        ):
            continue
        (sh, dh), (sw, dw) = (coeffs[2][y], coeffs[2][ry]), (coeffs[3][x], coeffs[3][rx])
        if min(sh, sw, dh, dw) < 1 or max(sh, sw) > config.max_stride:
            continue
        if max(ext[ry], ext[rx]) > config.max_kernel:
            continue
        data_shape = [const_int(d) for d in data.source.shape]
        if None in data_shape or data_shape[:2] != [ext[n], ext[rc]]:
            continue  # groups = 1: every output channel reads all input channels
        data_pos = [i for i, b in enumerate(reads) if b.same_as(data.source)]
        weight_pos = [i for i, b in enumerate(reads) if b.same_as(weight.source)]
        if len(data_pos) != 1 or len(weight_pos) != 1:
            continue
        return (
            ext[n], ext[f], ext[rc], (ext[ry], ext[rx]), (sh, sw), (dh, dw),
            (ext[y], ext[x]), data_pos[0], weight_pos[0],
        )
    return None


def _match_pool(  # pylint: disable=too-many-locals,too-many-return-statements
    sch: s_tir.Schedule,
    pool: SBlockRV,
    source: tirx.Buffer,
    config: ConvPoolConfig,
) -> Optional[Tuple[Tuple[int, int], Tuple[int, int], Tuple[int, int], Tuple[int, int], bool, str]]:
    """Match ``pool[n,f,p,q] = max|sum(pool[...], E)`` where every read of ``source`` (the conv
    output, shape ``[N, F, H, W]``) in ``E`` is ``source[n, f, p*S + rv0 - P, q*S' + rv1 - P']``
    over a ``K x K'`` window with stride ``S <= K`` (windows may overlap) and padding ``P < K``; in ceil
    mode the last window may hang over the end of ``H x W`` (read under the pool's guard).

    In a fused PrimFunc a padding or overhang is gone once ``ConvPool.prepare`` moved it into the
    conv (:mod:`.pool_padding`); where it could not, :func:`match_conv_pool_group` declines: TVM's
    ``compute_at`` would clamp the conv rows an edge thread computes to the conv's domain (a
    per-thread register-tile offset that nvcc keeps in local memory, or predicated FMAs).

    Returns ``((pooled rows, pooled cols), (K, K'), (S, S'), (P, P'), overhang, "max" | "sum")``
    or None.
    """
    block = sch.get(pool)
    if not trivially_bound(sch, pool):
        return None
    ivars = [iv.var for iv in block.iter_vars]
    ext = [const_int(iv.dom.extent) for iv in block.iter_vars]
    kinds = [iv.iter_type for iv in block.iter_vars]
    if kinds != [tirx.IterVar.DataPar] * 4 + [tirx.IterVar.CommReduce] * 2:
        return None
    n, f, p, q, r0, r1 = range(6)
    store = block.body
    if not isinstance(store, tirx.BufferStore) or block.init is None:
        return None
    if [var_position(i, ivars) for i in store.indices] != [n, f, p, q]:
        return None
    value = store.value
    if isinstance(value, tirx.Max):
        kind = "max"
    elif isinstance(value, tirx.Add):
        kind = "sum"
    else:
        return None
    operands = [value.a, value.b]
    acc = [
        i for i, v in enumerate(operands)
        if isinstance(v, TensorLoad) and v.source.same_as(store.buffer)
    ]
    if len(acc) != 1:
        return None
    expr = operands[1 - acc[0]]
    window = (ext[r0], ext[r1])
    if max(window) > config.max_window or min(window) < 1:
        return None
    reads = [ld for ld in tensor_loads(expr) if ld.source.same_as(source)]
    if not reads or any(ld.source.same_as(store.buffer) for ld in tensor_loads(expr)):
        return None
    strides = set()
    for ld in reads:
        coeffs = [linear_coefficients(i, ivars) for i in ld.indices]
        if None in coeffs or not (
            only_coefficients(coeffs[0], {n: 1})
            and only_coefficients(coeffs[1], {f: 1})
            and only_coefficients(coeffs[2][:-1] + [0], {p: None, r0: 1})
            and only_coefficients(coeffs[3][:-1] + [0], {q: None, r1: 1})
        ):
            return None
        strides.add(((coeffs[2][p], coeffs[3][q]), (-coeffs[2][-1], -coeffs[3][-1])))
    if len(strides) != 1:
        return None
    ((stride, padding),) = strides
    if not all(0 <= pd < k for pd, k in zip(padding, window)):
        return None
    if not all(1 <= s <= k for s, k in zip(stride, window)):
        return None
    shape = [const_int(d) for d in source.shape]
    if len(shape) != 4 or shape[:2] != [ext[n], ext[f]]:
        return None
    # Every window starts inside the conv output; in ceil mode the last may hang over its end
    # (the pool's guard stays in E: those positions are never read).
    overhang = False
    for pooled, s, k, pd, extent in zip((ext[p], ext[q]), stride, window, padding, shape[2:]):
        if (pooled - 1) * s - pd >= extent:
            return None
        overhang = overhang or (pooled - 1) * s - pd + k > extent
    return (ext[p], ext[q]), window, stride, tuple(padding), overhang, kind
