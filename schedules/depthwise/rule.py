"""A schedule rule for depthwise 2-D convolution (NCHW) with its element-wise epilogue.

dlight has no rule for a depthwise convolution: its ``Reduction`` rule takes the KHxKW window for
the reduction and launches one block per output element (on MobileNetV2 at batch 32 that is 70 of
73.5 ms on an H200, see ``design.md``). This rule recognises the convolution from the TIR itself,
not from names: one reduction block ``out[n, c, h, w] += data[n, c, h*sh + kh*dh, w*sw + kw*dw] *
weight[c, 0, kh, kw]`` (the group-conv form with a unit ``rc`` axis too), an optional padding block
producing ``data``, and any element-wise epilogue (bias add, BatchNorm, clip, ...) after it.

The schedule gives each block a tile of ``TC`` channels x ``TH`` rows x ``TW`` columns of one
image. The block stages its input tile with the halo in shared memory (the padding block computes
straight into it, cooperatively and coalesced along W), each thread keeps the channel's KHxKW
weights and ``VH`` vertically adjacent outputs in registers, and writes the fused epilogue
directly. Threads run along W and a thread's outputs along H: shared-memory reads are then
bank-conflict free at stride 1, every global store of a warp is one contiguous row segment, and a
thread's ``VH`` outputs still share its input window in registers (``(VH-1)*sh + KH`` rows of
``KW`` values loaded for ``VH*KH*KW`` taps). Outputs along W per thread would give the same reuse
with ``VH``-way bank conflicts and strided stores.

The tile is chosen per layer by a cost model on the target's hardware profile (warp size, shared
memory, registers, SMs, DRAM bandwidth, issue rate), calibrated against ptxas and H200 timings.
Measured on an H200 (fp32, cold L2), MobileNetV2 batch 32: the 17 depthwise convs take 0.35 ms
instead of 71 ms with dlight's rules; the 32x112x112 layer runs at 2.9 TB/s (35 us).
"""

from __future__ import annotations

from typing import Optional, Tuple

from tvm import s_tir, tirx
from tvm.runtime import DataType
from tvm.target import Target

from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import (
    const_int,
    inline_all_but,
    is_reduction,
    linear_coefficients,
    mac_operands,
    only_coefficients,
    padding_producer,
    single_reduction,
    trivially_bound,
    var_position,
)

from .tiles import DepthwiseConfig, DepthwiseProblem, DepthwiseTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV


class DepthwiseConv(TiledScheduleRule):
    """Depthwise conv2d (NCHW, weights [C, 1, KH, KW]) + element-wise epilogue, tiled in shared memory.

    Returns ``None`` for any PrimFunc that is not exactly one such convolution (with an optional
    padding producer and one injective epilogue chain), so that dlight's rules take it.
    """

    #: the search bounds; the class lives beside the tile model (:mod:`.tiles`)
    Config = DepthwiseConfig

    def get_config(self, target: Target) -> "DepthwiseConv.Config":
        """The search bounds for ``target``'s kind."""
        if target.kind.name == "rocm":
            # wave64 and 64-byte lines. At most 256 threads: TVM 0.27's AMDGPU codegen, built
            # without an AMD GPU present, compiles every kernel for a work-group of at most 256
            # (see tvm_fusion_hw.feedback.kernel_resources), whatever the target says.
            return DepthwiseConv.Config(min_threads=64, max_threads=256, sector_bytes=64)
        return DepthwiseConv.Config()

    # ---- the rule: TiledScheduleRule calls these three -----------------------------------------
    @staticmethod
    def match(sch, config, limits):  # pylint: disable=unused-argument
        """``(problem, *blocks)`` of the pattern in ``sch`` (surroundings inlined), or None."""
        return match_depthwise_group(sch, config)

    @staticmethod
    def rank(problem, limits, config):
        """Tiles for ``problem``, best first."""
        return rank_tiles(problem, limits, config)

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply ``tile`` to the matched blocks."""
        _schedule(sch, problem, tile, *blocks)


def match_depthwise_group(  # pylint: disable=too-many-branches
    sch: s_tir.Schedule, config: "DepthwiseConv.Config"
) -> Optional[Tuple[DepthwiseProblem, SBlockRV, Optional[SBlockRV], Optional[SBlockRV]]]:
    """Find the convolution, its padding producer and its epilogue; inline all other blocks.

    Returns ``(problem, conv, pad, epilogue)`` (``pad``/``epilogue`` may be None) or None. The
    depthwise + pointwise rule (:mod:`.dw_pw`) asks it of a pair's producer PrimFunc too.
    """
    found = single_reduction(sch)
    if found is None:
        return None
    root, _, conv = found
    problem = match_depthwise(sch, conv, config)
    if problem is None:
        return None
    conv_stmt = sch.get(conv)
    data = conv_stmt.reads[problem.data_read_index].source
    weight = conv_stmt.reads[problem.weight_read_index].source

    # The data may come from one spatial block (the padding); the weights from none.
    matched, pad = padding_producer(sch, conv, data, weight)
    if not matched:
        return None
    rest = inline_all_but(sch, root, [conv] + ([pad] if pad is not None else []))
    epilogue = None
    if len(rest) == 1:
        consumers = sch.get_consumers(conv)
        if len(consumers) != 1 or not sch.get(consumers[0]).same_as(sch.get(rest[0])):
            return None
        if is_reduction(sch.get(rest[0])):
            return None
        epilogue = rest[0]
    elif rest:
        return None
    return problem, conv, pad, epilogue


def match_depthwise(  # pylint: disable=too-many-locals,too-many-return-statements,too-many-branches
    sch: s_tir.Schedule, conv: SBlockRV, config: "DepthwiseConv.Config"
) -> Optional[DepthwiseProblem]:
    """Match ``out[n,c,h,w] += data[n, c(+rc), h*sh+kh*dh, w*sw+kw*dw] * weight[c, rc|0, kh, kw]``.

    Iterators are compared by position in the block; ``rc`` (and any other reduction iterator
    beyond ``kh`` and ``kw``) must have extent 1, which is the group-conv form of a depthwise conv.
    ``config`` needs only ``max_stride`` and ``max_kernel``: the depthwise + pointwise rule
    (:mod:`.dw_pw`) matches its depthwise half here with its own config.
    """
    block = sch.get(conv)
    if not trivially_bound(sch, conv):
        return None
    ivars = [iv.var for iv in block.iter_vars]
    ext = [const_int(iv.dom.extent) for iv in block.iter_vars]
    spatial = [i for i, iv in enumerate(block.iter_vars) if iv.iter_type == tirx.IterVar.DataPar]
    red = [i for i, iv in enumerate(block.iter_vars) if iv.iter_type == tirx.IterVar.CommReduce]
    if len(spatial) != 4 or len(spatial) + len(red) != len(ivars) or len(red) < 2:
        return None
    n, c, h, w = spatial
    store = block.body
    if [var_position(i, ivars) for i in store.indices] != spatial:
        return None
    loads = mac_operands(block)
    if loads is None:
        return None
    units = {r: None for r in red if ext[r] == 1}  # always 0: any coefficient is harmless
    reads = [r.source for r in block.reads]
    for weight, data in (loads, loads[::-1]):
        # The weight is weight[c, rc | 0, kh, kw], shape [C, 1, KH, KW].
        widx = [var_position(i, ivars) for i in weight.indices]
        kh, kw = widx[2], widx[3]
        if widx[0] != c or kh not in red or kw not in red or kh == kw:
            continue
        if widx[1] is None and const_int(weight.indices[1]) != 0:
            continue
        if widx[1] is not None and widx[1] not in units:
            continue
        if any(r not in (kh, kw) and r not in units for r in red):
            continue
        if [const_int(d) for d in weight.source.shape] != [ext[c], 1, ext[kh], ext[kw]]:
            continue
        # The data is data[n, c (+ rc), h*sh + kh*dh, w*sw + kw*dw], shape [N, C, ., .].
        coeffs = [linear_coefficients(i, ivars) for i in data.indices]
        if not (only_coefficients(coeffs[0], {n: 1, **units}) and only_coefficients(coeffs[1], {c: 1, **units})):
            continue
        if not (
            only_coefficients(coeffs[2], {h: None, kh: None, **units})
            and only_coefficients(coeffs[3], {w: None, kw: None, **units})
        ):
            continue
        (sh, dh), (sw, dw) = (coeffs[2][h], coeffs[2][kh]), (coeffs[3][w], coeffs[3][kw])
        if min(sh, sw, dh, dw) < 1 or max(sh, sw) > config.max_stride:
            continue
        if max(ext[kh], ext[kw]) > config.max_kernel:
            continue
        data_shape = [const_int(d) for d in data.source.shape]
        if None in data_shape or data_shape[:2] != [ext[n], ext[c]]:
            continue
        data_pos = [i for i, b in enumerate(reads) if b.same_as(data.source)]
        weight_pos = [i for i, b in enumerate(reads) if b.same_as(weight.source)]
        if len(data_pos) != 1 or len(weight_pos) != 1:
            continue
        return DepthwiseProblem(
            batch=ext[n],
            channels=ext[c],
            height=ext[h],
            width=ext[w],
            kernel=(ext[kh], ext[kw]),
            stride=(sh, sw),
            dilation=(dh, dw),
            dtype_bytes=max(1, DataType(str(data.source.dtype)).bits // 8),
            data_read_index=data_pos[0],
            weight_read_index=weight_pos[0],
        )
    return None


# ---- the schedule ----------------------------------------------------------------------------
def _schedule(  # pylint: disable=too-many-arguments,too-many-locals
    sch: s_tir.Schedule,
    problem: DepthwiseProblem,
    tile: DepthwiseTile,
    conv: SBlockRV,
    pad: Optional[SBlockRV],
    epilogue: Optional[SBlockRV],
) -> None:
    """Apply ``tile`` to the matched convolution (see the module docstring for the structure)."""
    block = sch.get(conv)
    loops = sch.get_loops(conv)
    spatial = [l for l, iv in zip(loops, block.iter_vars) if iv.iter_type == tirx.IterVar.DataPar]
    reduce_ = [l for l, iv in zip(loops, block.iter_vars) if iv.iter_type != tirx.IterVar.DataPar]
    n, c, h, w = spatial

    # Step 3a. Tile the output: block = (n, channel tile, row tile, column tile); threads =
    # (channel, thread row, column); each thread VH rows. Non-dividing factors add guards.
    c_o, c_i = sch.split(c, [None, tile.channels])
    h_o, h_t, h_v = sch.split(h, [None, tile.thread_rows, tile.rows_per_thread])
    w_o, w_t = sch.split(w, [None, tile.cols])
    sch.reorder(n, c_o, h_o, w_o, c_i, h_t, w_t, *reduce_, h_v)
    bx = sch.fuse(n, c_o, h_o, w_o)
    tx = sch.fuse(c_i, h_t, w_t)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")

    # Step 3b. Accumulate in registers; the epilogue is computed on the way out.
    acc = sch.cache_write(conv, 0, "local")
    if epilogue is not None:
        sch.reverse_compute_inline(epilogue)
    sch.reverse_compute_at(acc, tx, preserve_unit_loops=True)
    for loop in sch.get_loops(acc)[2:]:
        sch.unroll(loop)

    # Step 3c. The channel's KHxKW weights in registers.
    wgt = sch.cache_read(conv, problem.weight_read_index, "local")
    sch.compute_at(wgt, tx, preserve_unit_loops=True)
    for loop in sch.get_loops(wgt)[2:]:
        sch.unroll(loop)

    # Step 3d. The input tile with its halo in shared memory: the padding block (or a plain copy)
    # writes it, all threads together, consecutive threads on consecutive columns.
    if pad is None:
        pad = sch.cache_read(conv, problem.data_read_index, "shared")
    else:
        sch.set_scope(pad, 0, "shared")
    sch.compute_at(pad, bx, preserve_unit_loops=True)
    _, _, ch, row, col = sch.get_loops(pad)
    if tile.load_mode == "rows":
        # Whole rows per pass: a thread's (row, column) offsets are computed once, not per element.
        load_o, rows_i = sch.split(sch.fuse(ch, row), [None, tile.load_rows_per_pass])
        _, load_t = sch.split(sch.fuse(rows_i, col), [1, tile.threads])
    else:
        load_o, load_t = sch.split(sch.fuse(ch, row, col), [None, tile.threads])
    sch.bind(load_t, "threadIdx.x")
    sch.unroll(load_o)

    # Step 3e. Unroll the window and the per-thread rows; zero the accumulators first.
    for loop in reduce_ + [h_v]:
        sch.unroll(loop)
    sch.decompose_reduction(conv, reduce_[0])
