"""How DepthwisePointwise (:mod:`.dw_pw`) recognises its group in TIR: the fused PrimFunc, and
the depthwise and pointwise PrimFuncs before fusion (for the fusion policy).

:func:`match_dw_pw_group` finds the padding, the depthwise conv (matched by :mod:`.depthwise_conv`),
the block the pointwise conv reads, the pointwise conv and its tail in a schedule of the fused
PrimFunc and inlines every other block; :func:`pair_problem` judges the two PrimFuncs apart. Both
give the :class:`~.dw_pw_tiles.DwPwProblem` the tile model ranks. The pattern is described in
:mod:`.dw_pw`; iterators are compared by position in the block, never by name.
"""

from __future__ import annotations

from typing import Optional, Tuple

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block

from tvm_fusion_hw.schedules.base.tir_match import (
    const_int,
    inline_all_but,
    is_plain_spatial,
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
from tvm_fusion_hw.schedules.depthwise.rule import match_depthwise, match_depthwise_group

from .tiles import DwPwConfig, DwPwProblem

SBlockRV = s_tir.schedule.SBlockRV


def _match_pointwise(sch: s_tir.Schedule, pw: SBlockRV) -> Optional[Tuple[int, int, int, int, int, int]]:
    """Match ``out[n,f,y,x] += data[n, rc, y + ry, x + rx] * weight[f, rc, ry, rx]`` with a 1x1
    window (``ry``, ``rx`` of extent 1 or absent), stride 1, ``data`` of shape ``[N, C, H, W]``.

    Returns ``(batch, out_channels, channels, (height, width), data read index, weight read
    index)`` as a flat tuple ``(N, F, C, H, W, data_pos, weight_pos)`` or None.
    """
    block = sch.get(pw)
    if not trivially_bound(sch, pw) or len(block.writes) != 1:
        return None
    ivars = [iv.var for iv in block.iter_vars]
    ext = [const_int(iv.dom.extent) for iv in block.iter_vars]
    kinds = [iv.iter_type for iv in block.iter_vars]
    if kinds[:4] != [tirx.IterVar.DataPar] * 4 or any(k != tirx.IterVar.CommReduce for k in kinds[4:]):
        return None
    n, f, y, x = range(4)
    red = list(range(4, len(ivars)))
    units = {r: None for r in red if ext[r] == 1}
    rcs = [r for r in red if ext[r] != 1]
    if len(rcs) != 1:
        return None
    rc = rcs[0]
    if [var_position(i, ivars) for i in block.body.indices] != [n, f, y, x]:
        return None
    loads = mac_operands(block)
    if loads is None:
        return None
    reads = [r.source for r in block.reads]
    for weight, data in (loads, loads[::-1]):
        widx = [linear_coefficients(i, ivars) for i in weight.indices]
        if not (only_coefficients(widx[0], {f: 1, **units}) and only_coefficients(widx[1], {rc: 1, **units})
                and all(only_coefficients(c, dict(units)) for c in widx[2:])):
            continue
        if [const_int(d) for d in weight.source.shape] != [ext[f], ext[rc], 1, 1]:
            continue
        coeffs = [linear_coefficients(i, ivars) for i in data.indices]
        if not all(only_coefficients(c, {axis: 1, **units}) for c, axis in zip(coeffs, (n, rc, y, x))):
            continue
        if [const_int(d) for d in data.source.shape] != [ext[n], ext[rc], ext[y], ext[x]]:
            continue
        data_pos = [i for i, b in enumerate(reads) if b.same_as(data.source)]
        weight_pos = [i for i, b in enumerate(reads) if b.same_as(weight.source)]
        if len(data_pos) != 1 or len(weight_pos) != 1:
            continue
        return ext[n], ext[f], ext[rc], ext[y], ext[x], data_pos[0], weight_pos[0]
    return None


def _reads_elementwise(block: s_tir.SBlock, source: tirx.Buffer) -> bool:
    """Every load of ``source`` in ``block`` is at the block's own (spatial) indices, and one is."""
    ivars = [iv.var for iv in block.iter_vars]
    loads = [ld for ld in tensor_loads(block.body) if ld.source.same_as(source)]
    return bool(loads) and all(
        [var_position(i, ivars) for i in ld.indices] == list(range(len(ivars))) for ld in loads)


def _tail(sch: s_tir.Schedule, pw: SBlockRV, rest: list) -> Tuple[bool, Optional[SBlockRV]]:
    """``(True, tail)`` when the blocks left besides the pattern are at most one spatial block
    that alone reads the pointwise result; ``(False, None)`` else."""
    if not rest:
        return True, None
    if len(rest) != 1 or is_reduction(sch.get(rest[0])):
        return False, None
    consumers = sch.get_consumers(pw)
    if len(consumers) != 1 or not sch.get(consumers[0]).same_as(sch.get(rest[0])):
        return False, None
    return True, rest[0]


def _float32(*buffers: tirx.Buffer) -> bool:
    return all(str(b.dtype) == "float32" for b in buffers)


def match_dw_pw_group(  # pylint: disable=too-many-return-statements,too-many-locals,too-many-branches
    sch: s_tir.Schedule, config: DwPwConfig
) -> Optional[tuple]:
    """Find the padding, the depthwise conv, the block the pointwise conv reads (its epilogue
    ends there), the pointwise conv and its tail; inline all other blocks.

    Returns ``(problem, pad, dw, inter, pw, tail)`` (``pad``/``tail`` may be None; ``inter`` is
    None where the pointwise conv reads the depthwise result itself) or None.
    """
    pair = reduction_pair(sch)
    if pair is None:
        return None
    root, dw, pw = pair
    dw_problem = match_depthwise(sch, dw, config)
    pw_shape = _match_pointwise(sch, pw)
    if dw_problem is None or pw_shape is None:
        return None
    batch, out_ch, channels, height, width, pw_data_pos, pw_weight_pos = pw_shape
    if (dw_problem.batch, dw_problem.channels, dw_problem.height, dw_problem.width) != (
            batch, channels, height, width):
        return None
    dw_stmt, pw_stmt = sch.get(dw), sch.get(pw)
    data = dw_stmt.reads[dw_problem.data_read_index].source
    dw_weight = dw_stmt.reads[dw_problem.weight_read_index].source
    pw_data = pw_stmt.reads[pw_data_pos].source
    pw_weight = pw_stmt.reads[pw_weight_pos].source
    dw_out, pw_out = dw_stmt.writes[0].source, pw_stmt.writes[0].source
    if not _float32(data, dw_weight, pw_data, pw_weight, dw_out, pw_out):
        return None

    # The data may come from one spatial block (the padding); the weights from none.
    matched, pad = padding_producer(sch, dw, data, dw_weight)
    if not matched:
        return None
    # The pointwise conv's operand: the depthwise result, or the last block of its epilogue.
    inter = None
    for producer in sch.get_producers(pw):
        written = [r.source for r in sch.get(producer).writes]
        if any(b.same_as(pw_weight) for b in written):
            return None
        if any(b.same_as(pw_data) for b in written) and not sch.get(producer).same_as(dw_stmt):
            inter = producer
    if inter is None and not dw_out.same_as(pw_data):
        return None
    keep = [dw, pw] + [b for b in (pad, inter) if b is not None]
    rest = inline_all_but(sch, root, keep)
    ok, tail = _tail(sch, pw, rest)
    if not ok:
        return None
    if inter is not None:
        # inter[n, c, h, w] = E(dw[n, c, h, w], per-channel parameters): nothing else reads dw.
        stmt = sch.get(inter)
        if not is_plain_spatial(stmt, pw_data) or not _reads_elementwise(stmt, dw_out):
            return None
        consumers = sch.get_consumers(dw)
        if len(consumers) != 1 or not sch.get(consumers[0]).same_as(stmt):
            return None
        if len(sch.get_consumers(inter)) != 1:
            return None
    tail_tensors = _tail_tensors(sch, tail, pw_out)
    problem = DwPwProblem(
        batch=batch,
        channels=channels,
        out_channels=out_ch,
        height=height,
        width=width,
        kernel=dw_problem.kernel,
        stride=dw_problem.stride,
        dilation=dw_problem.dilation,
        dtype_bytes=4,
        dw_data_read_index=dw_problem.data_read_index,
        dw_weight_read_index=dw_problem.weight_read_index,
        pw_data_read_index=pw_data_pos,
        pw_weight_read_index=pw_weight_pos,
        tail_tensors=tail_tensors,
    )
    return problem, pad, dw, inter, pw, tail


def pair_problem(  # pylint: disable=too-many-return-statements,too-many-locals
    producer: tirx.PrimFunc, consumer: tirx.PrimFunc, config: DwPwConfig
) -> Optional[DwPwProblem]:
    """The problem DepthwisePointwise would see in ``producer`` fused with ``consumer``, or None
    when it would not take them (see :func:`.dw_pw.supports_pair`)."""
    if not isinstance(producer, tirx.PrimFunc) or not isinstance(consumer, tirx.PrimFunc):
        return None
    try:
        sch = s_tir.Schedule(producer)
        matched = match_depthwise_group(sch, config)
        if matched is None:
            return None
        dw_problem, dw, _, epilogue = matched
        last = epilogue if epilogue is not None else dw
        if not _float32(*[r.source for r in sch.get(dw).reads], sch.get(last).writes[0].source):
            return None

        sch = s_tir.Schedule(consumer)
        root = get_root_block(sch)
        reductions = [b for b in sch.get_child_blocks(root) if is_reduction(sch.get(b))]
        if len(reductions) != 1:
            return None
        pw = reductions[0]
        pw_shape = _match_pointwise(sch, pw)
        if pw_shape is None:
            return None
        batch, out_ch, channels, height, width, data_pos, weight_pos = pw_shape
        if (dw_problem.batch, dw_problem.channels, dw_problem.height, dw_problem.width) != (
                batch, channels, height, width):
            return None
        stmt = sch.get(pw)
        data, weight = stmt.reads[data_pos].source, stmt.reads[weight_pos].source
        pw_out = stmt.writes[0].source
        if not _float32(data, weight, pw_out):
            return None
        matched, pad = padding_producer(sch, pw, data, weight)
        if not matched:
            return None
        ok, tail = _tail(sch, pw, inline_all_but(sch, root, [pw] + ([pad] if pad is not None else [])))
        if not ok:
            return None
        tail_tensors = _tail_tensors(sch, tail, pw_out)
    except RuntimeError:  # ScheduleError, InternalError
        return None
    return DwPwProblem(
        batch=batch, channels=channels, out_channels=out_ch, height=height, width=width,
        kernel=dw_problem.kernel, stride=dw_problem.stride, dilation=dw_problem.dilation,
        dtype_bytes=4, dw_data_read_index=dw_problem.data_read_index,
        dw_weight_read_index=dw_problem.weight_read_index, pw_data_read_index=data_pos,
        pw_weight_read_index=weight_pos, tail_tensors=tail_tensors,
    )


def _tail_tensors(sch: s_tir.Schedule, tail: Optional[SBlockRV], pw_out: tirx.Buffer) -> int:
    """Full-size tensors (a residual) the tail reads besides the pointwise result."""
    if tail is None:
        return 0
    shape = [const_int(d) for d in pw_out.shape]
    return sum(1 for r in sch.get(tail).reads if not r.source.same_as(pw_out)
               and [const_int(d) for d in r.source.shape] == shape)
