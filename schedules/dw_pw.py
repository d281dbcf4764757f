"""A schedule rule for a depthwise conv (+ epilogue) followed by a pointwise conv (+ epilogue), as
ONE kernel.

MobileNet's bottlenecks end in a depthwise 3x3 conv (+ BN + ReLU6) whose output only the next
pointwise 1x1 conv reads. Our fusion pass can put the two in one PrimFunc
(``depthwise_conv->pointwise_conv``, with the policy knob ``pair_templates``); without a template
dlight splits it into two untiled kernels with the depthwise result in a global workspace. This
rule recognises the group from the TIR, not from names: an optional padding block, one depthwise
convolution ``dw[n, c, h, w] += data[n, c, h*sh + kh*dh, w*sw + kw*dw] * wd[c, 0, kh, kw]`` (as
:mod:`.depthwise_conv` matches it), an element-wise epilogue (bias, BatchNorm, ReLU6; it ends in
one block that the pointwise conv reads, such as the conv's identity padding), one pointwise
convolution ``pw[n, f, h, w] += E[n, c, h, w] * wp[f, c, 0, 0]`` (stride 1) and an optional
element-wise tail (bias, BatchNorm, a residual add). :func:`supports_pair` answers the same for
the two PrimFuncs before fusion, for the fusion policy, and :func:`pair_plan` gives the tile (threads,
registers, shared memory per block) this rule would run them with on a target.

Structure. A block computes ``TH x TW`` pixels of one image for ``FT`` output channels: a GEMM of
``TH*TW`` pixels x ``FT`` channels over ``K = C``, its ``A`` operand the depthwise outputs, which
never go to global memory. The block loops over the channels in chunks of ``KC``; per chunk it

1. stages the chunk's input rows with their halo (the padding block computes straight into shared
   memory, whole rows per pass where they fit), the chunk's depthwise weights and the pointwise
   weights ``FT x KC`` (stored transposed, ``KC x FT``, so a thread's ``MF`` adjacent channels are
   one vector load) in shared memory, ``stage_unroll`` loads a thread in flight;
2. computes the ``KC x TH*TW`` depthwise outputs, epilogue applied, into a shared tile: threads as
   in the GEMM (channel group, pixel lane), each ``KC/TF`` channels x ``MP`` pixels, a channel's
   weights and epilogue parameters loaded once for its pixels;
3. accumulates the GEMM: each thread keeps ``MP x MF`` accumulators in registers, its pixels
   ``TP`` apart (a warp reads consecutive words of the shared tile: no bank conflicts) and its
   output channels adjacent (a broadcast among the threads of one channel group).

The pointwise epilogue (bias, BatchNorm, residual) runs on the accumulators before the one store.
The depthwise and GEMM loops stay rolled (``#pragma unroll 1``) but for ``unroll`` K steps, and the
kernel's ``__launch_bounds__`` name the planned blocks per SM, so that ptxas neither hoists a
whole pass's loads nor squeezes the kernel into spills for one more block (both seen on sm_90).

Tiles come from a cost model on the target's hardware profile (:mod:`.dw_pw_tiles`). On an H200
(ptxas, nvcc 13, sm_90), MobileNetV2's fused pairs at batch 1 get 128-256 threads, 15-45 KiB
shared and 44-64 registers; at batch 32 224-256 threads, 34-46 KiB and 53-72 registers; no
spills. Not measured on a GPU yet: the pair is not one of the policy's default pairs
(``FUSED_PAIR_TEMPLATES``) until it is.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.target import Target

from .common import (TiledScheduleRule, const_int, gpu_limits, inline_all_but, is_plain_spatial,
                     is_reduction, linear_coefficients, mac_operands, only_coefficients,
                     padding_producer, tensor_loads, trivially_bound, var_position,
                     with_min_blocks_per_multiprocessor)
from .depthwise_conv import match_depthwise, match_depthwise_group
from .dw_pw_tiles import DwPwProblem, DwPwTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV


class DepthwisePointwise(TiledScheduleRule):
    """Depthwise conv2d + epilogue + pointwise conv2d + epilogue (NCHW, float32), one kernel.

    Returns ``None`` for any PrimFunc that is not exactly such a group (see the module docstring),
    so that the next rule takes it.
    """

    @dataclasses.dataclass
    class Config:  # pylint: disable=too-many-instance-attributes
        """Tile-search bounds; the hardware figures come from the target, not from here.

        Attributes
        ----------
        min_threads, max_threads : int
            Threads per block (a multiple of the warp).
        max_pixels : int
            Upper bound on ``TH x TW`` (the GEMM's M per block).
        max_pixels_per_thread, max_channels_per_thread : int
            Upper bounds on ``MP`` and ``MF``.
        max_accumulators : int
            ``MP x MF`` at most: keeps ptxas well below 128 registers.
        max_out_channels : int
            Upper bound on ``FT``.
        max_chunk : int
            Upper bound on ``KC`` (shared memory bounds it too).
        stage_unroll : int
            Iterations of a staging loop unrolled (``#pragma unroll``): global loads a thread has
            in flight before it waits. Unrolled whole, ptxas hoists every load of a pass and the
            registers follow the tile's halo (up to 254 seen on sm_90). 0: no pragma.
        max_unroll, max_unrolled_fma : int
            K steps and FMAs in one unrolled step of the GEMM's K loop (the compiler loads every
            unrolled step's operands ahead: registers).
        max_registers : int
            Estimated registers per thread allowed (ptxas leaves a kernel alone up to 128, see
            :mod:`.conv_pool`).
        max_kernel, max_stride : int
            Largest depthwise kernel side and stride handled.
        max_attempts : int
            Ranked tiles tried before giving up, when TVM compacts a shared buffer to more than
            planned.
        shortlist : int
            Shapes whose every chunk is costed, after all shapes were costed at their largest chunk.
        """

        min_threads: int = 64
        max_threads: int = 256
        max_pixels: int = 512
        max_pixels_per_thread: int = 8
        max_channels_per_thread: int = 8
        max_accumulators: int = 64
        max_out_channels: int = 128
        max_chunk: int = 256
        stage_unroll: int = 8
        max_unroll: int = 8
        max_unrolled_fma: int = 128
        max_registers: int = 128
        max_kernel: int = 7
        max_stride: int = 2
        max_attempts: int = 8
        shortlist: int = 48

    def get_config(self, target: Target) -> "DepthwisePointwise.Config":
        """The search bounds for ``target``'s kind: at most 256 threads on both (TVM 0.27's AMDGPU
        codegen compiles every kernel for a work-group of at most 256, see kernel_resources); on
        ROCm no unroll pragma (TVM's LLVM codegen ignores it, and LLVM unrolls the loops itself)."""
        if target.kind.name == "rocm":
            return DepthwisePointwise.Config(stage_unroll=0)
        return DepthwisePointwise.Config()

    def apply(self, func: tirx.PrimFunc, target: Target, _: bool) -> Optional[s_tir.Schedule]:
        """``func`` scheduled with the best tile that compacts as planned, launch-bounded."""
        planned = self.schedule_best(func, target)
        return None if planned is None else with_min_blocks_per_multiprocessor(planned[2], planned[1].blocks_per_multiprocessor)

    def schedule_tile(self, func: tirx.PrimFunc, target: Target, tile) -> Optional[s_tir.Schedule]:
        """``func`` scheduled with ``tile``, launch-bounded; None when it is not this pattern."""
        sch = super().schedule_tile(func, target, tile)
        return None if sch is None else with_min_blocks_per_multiprocessor(sch, tile.blocks_per_multiprocessor)

    # ---- the rule: TiledScheduleRule calls these three -----------------------------------------
    @staticmethod
    def match(sch, config):
        """``(problem, *blocks)`` of the pattern in ``sch`` (surroundings inlined), or None."""
        return _match_and_inline(sch, config)

    @staticmethod
    def rank(problem, limits, config):
        """Tiles for ``problem``, best first."""
        return rank_tiles(problem, limits, config)

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply ``tile`` to the matched blocks."""
        _schedule(sch, problem, tile, *blocks)


# ---- matching --------------------------------------------------------------------------------
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


def _match_and_inline(  # pylint: disable=too-many-return-statements,too-many-locals,too-many-branches
    sch: s_tir.Schedule, config: "DepthwisePointwise.Config"
) -> Optional[tuple]:
    """Find the padding, the depthwise conv, the block the pointwise conv reads (its epilogue
    ends there), the pointwise conv and its tail; inline all other blocks.

    Returns ``(problem, pad, dw, inter, pw, tail)`` (``pad``/``tail`` may be None; ``inter`` is
    None where the pointwise conv reads the depthwise result itself) or None.
    """
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    reductions = [b for b in sch.get_child_blocks(root) if is_reduction(sch.get(b))]
    if len(reductions) != 2:
        return None
    dw, pw = reductions
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


def supports_pair(producer: tirx.PrimFunc, consumer: tirx.PrimFunc) -> bool:
    """Whether DepthwisePointwise would take ``producer`` (a depthwise conv and its epilogue, as one
    PrimFunc) fused with ``consumer`` (a pointwise conv and its epilogue), judged on the two
    before fusion.

    For the fusion policy: fusing a pair this rule then declines leaves dlight two convolutions in
    one PrimFunc, which it can only split into two untiled kernels. The producer must be what
    :mod:`.depthwise_conv` matches (one depthwise conv, its padding, one epilogue chain) within this
    rule's limits, in float32; the consumer one 1x1 stride-1 conv (groups = 1) over the
    producer's channels and plane, its data read as is (or through an identity padding), and at
    most one element-wise tail. Tiles are not asked: a tile of one row and one channel a pass
    fits any GPU's shared memory (:func:`pair_plan` ranks them on a target).
    """
    return _pair_problem(producer, consumer, DepthwisePointwise.Config()) is not None


def pair_plan(producer: tirx.PrimFunc, consumer: tirx.PrimFunc, target: Target) -> Optional[DwPwTile]:
    """The tile DepthwisePointwise would run ``producer`` fused with ``consumer`` with on
    ``target`` (its threads, registers estimate and shared bytes per block, the modelled time),
    or None when the rule cannot run the pair (see :func:`supports_pair`) or no tile fits.

    The same problem and ranking as ``DepthwisePointwise().plan`` on the fused PrimFunc, for a
    fusion policy that judges a pair by the kernel its template would make. At build time the rule
    takes the next ranked tile only when TVM compacts a shared buffer to more than planned.
    """
    rule = DepthwisePointwise()
    if not isinstance(target, Target) or not rule.is_target_available(target):
        return None
    config = rule.get_config(target)
    problem = _pair_problem(producer, consumer, config)
    if problem is None:
        return None
    tiles = rank_tiles(problem, gpu_limits(target), config)
    return tiles[0] if tiles else None


def _pair_problem(  # pylint: disable=too-many-return-statements,too-many-locals
    producer: tirx.PrimFunc, consumer: tirx.PrimFunc, config: "DepthwisePointwise.Config"
) -> Optional[DwPwProblem]:
    """The problem DepthwisePointwise would see in ``producer`` fused with ``consumer``, or None
    when it would not take them (see :func:`supports_pair`)."""
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


# ---- the schedule ----------------------------------------------------------------------------
def _cooperative(sch: s_tir.Schedule, loops: list, plan: Tuple[str, int], threads: int, unroll: int) -> None:
    """Spread a staging block's ``loops`` (lines ..., then the contiguous run) over the threads,
    ``unroll`` iterations of the loop over passes unrolled (0: no pragma)."""
    mode, per_pass = plan
    if mode == "rows":
        outer, lines_i = sch.split(sch.fuse(*loops[:-1]), [None, per_pass])
        _, lane = sch.split(sch.fuse(lines_i, loops[-1]), [1, threads])
    else:
        outer, lane = sch.split(sch.fuse(*loops), [None, threads])
    sch.bind(lane, "threadIdx.x")
    if unroll:
        sch.annotate(outer, "pragma_unroll", unroll)


def _read_index(sch: s_tir.Schedule, block: SBlockRV, buffer: tirx.Buffer) -> int:
    """Position of ``buffer`` among ``block``'s reads (it moves once the reduction is decomposed)."""
    reads = [r.source for r in sch.get(block).reads]
    return next(i for i, b in enumerate(reads) if b.same_as(buffer))


def _schedule(  # pylint: disable=too-many-arguments,too-many-locals
    sch: s_tir.Schedule,
    problem: DwPwProblem,
    tile: DwPwTile,
    pad: Optional[SBlockRV],
    dw: SBlockRV,
    inter: Optional[SBlockRV],
    pw: SBlockRV,
    tail: Optional[SBlockRV],
) -> None:
    """Apply ``tile`` to the matched group (see the module docstring for the structure)."""
    threads, stage_unroll = tile.threads, tile.stage_unroll
    dw_stmt = sch.get(dw)
    dw_data_buf = dw_stmt.reads[problem.dw_data_read_index].source
    dw_weight_buf = dw_stmt.reads[problem.dw_weight_read_index].source

    # Step 3a. Tile the pointwise output: block = (n, channel tile, row tile, column tile);
    # threads = (channel group, pixel lane); each thread MF adjacent channels x MP pixels TP apart
    # (virtual threads: each pixel's accumulators and store are the thread's own).
    n, f, y, x, *red = sch.get_loops(pw)
    f_o, f_t, f_v = sch.split(f, [None, tile.channel_threads, tile.channels_per_thread])
    y_o, y_i = sch.split(y, [None, tile.rows])
    x_o, x_i = sch.split(x, [None, tile.cols])
    sch.reorder(n, f_o, y_o, x_o, f_t, y_i, x_i, f_v, *red)
    p_v, p_t = sch.split(sch.fuse(y_i, x_i), [tile.pixels_per_thread, tile.pixel_threads])
    rc = next(loop for loop, iv in zip(red, sch.get(pw).iter_vars[4:]) if const_int(iv.dom.extent) != 1)
    units = [loop for loop in red if not loop.same_as(rc)]
    rc_o, rc_m, rc_u = sch.split(rc, [None, tile.chunk // tile.unroll, tile.unroll])
    sch.reorder(p_v, f_t, p_t, rc_o, rc_m, rc_u, *units, f_v)
    bx = sch.fuse(n, f_o, y_o, x_o)
    tx = sch.fuse(f_t, p_t)
    sch.bind(bx, "blockIdx.x")
    sch.bind(p_v, "vthread.x")
    sch.bind(tx, "threadIdx.x")

    # Step 3b. Accumulators in registers; the tail (bias, BatchNorm, residual) on the way out.
    out = sch.cache_write(pw, 0, "local")
    if tail is not None:
        sch.reverse_compute_inline(tail)
    sch.reverse_compute_at(out, tx, preserve_unit_loops=True)

    # Step 3c. The chunk's pointwise weights in shared memory, transposed (KC x FT: a thread's MF
    # channels are adjacent), staged first so that one barrier serves all the staging.
    pw_weight = sch.cache_read(pw, problem.pw_weight_read_index, "shared")
    sch.transform_layout(pw_weight, ("write", 0), lambda a, b, c, d: (b, c, d, a))
    sch.compute_at(pw_weight, rc_o, preserve_unit_loops=True)
    _cooperative(sch, sch.get_loops(pw_weight)[-4:], ("flat", 0), threads, stage_unroll)

    # Step 3d. The depthwise outputs of the chunk, epilogue applied, in a shared tile: all
    # threads, consecutive threads on consecutive pixels; each output's taps in registers.
    if inter is None:
        inter = sch.cache_read(pw, problem.pw_data_read_index, "shared")
    else:
        sch.set_scope(inter, 0, "shared")
    sch.compute_at(inter, rc_o, preserve_unit_loops=True)
    # Threads as in the GEMM: (channel group, pixel lane), each thread KC/TF channels TF apart x
    # MP pixels TP apart (affine bindings, so the taps' reduction can be decomposed).
    _, i_c, i_y, i_x = sch.get_loops(inter)[-4:]
    i_co, i_ct = sch.split(i_c, [None, tile.channel_threads])
    i_pv, i_pt = sch.split(sch.fuse(i_y, i_x), [tile.pixels_per_thread, tile.pixel_threads])
    sch.reorder(i_ct, i_pt, i_co, i_pv)
    inter_t = sch.fuse(i_ct, i_pt)
    sch.bind(inter_t, "threadIdx.x")
    sch.set_scope(dw, 0, "local")
    sch.compute_at(dw, i_pv, preserve_unit_loops=True)
    dw_red = sch.get_loops(dw)[-(len(sch.get(dw).iter_vars) - 4):]
    for loop in dw_red:
        sch.unroll(loop)
    sch.decompose_reduction(dw, dw_red[0])

    # Step 3e. Stage the chunk's input (the padding block computes into shared memory) and the
    # depthwise weights in shared memory, all threads together.
    dw_weight = sch.cache_read(dw, _read_index(sch, dw, dw_weight_buf), "shared")
    sch.compute_at(dw_weight, rc_o, preserve_unit_loops=True)
    _cooperative(sch, sch.get_loops(dw_weight)[-4:], ("flat", 0), threads, stage_unroll)
    if pad is None:
        pad = sch.cache_read(dw, _read_index(sch, dw, dw_data_buf), "shared")
    else:
        sch.set_scope(pad, 0, "shared")
    sch.compute_at(pad, rc_o, preserve_unit_loops=True)
    _cooperative(sch, sch.get_loops(pad)[-4:], tile.input_load, threads, stage_unroll)

    # Step 3f. Unroll the register tiles; zero the accumulators before the channel loop.
    sch.annotate(i_co, "disable_unroll", True)
    sch.annotate(i_pv, "disable_unroll", True)
    sch.annotate(rc_m, "disable_unroll", True)
    for loop in [rc_u, *units, f_v]:
        sch.unroll(loop)
    for loop in sch.get_loops(out)[3:]:  # below blockIdx, vthread and threadIdx
        sch.unroll(loop)
    sch.decompose_reduction(pw, rc_o)
