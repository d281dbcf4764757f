"""A schedule rule for conv2d (NCHW) + element-wise epilogue + a KxK/K pool, as ONE kernel.

Stock FuseOps never puts a convolution and a pool in one kernel (two "complex" groups); our fusion
pass does (``conv->window``), and without a template dlight splits the fused PrimFunc into two
untiled kernels with the conv result in a global workspace. This rule recognises the group from the
TIR, not from names: an optional padding block, one convolution ``conv[n, f, y, x] += data[n, rc,
y*sh + ry*dh, x*sw + rx*dw] * weight[f, rc, ry, rx]`` (groups = 1, weight ``[F, C, KH, KW]``; a
1x1 conv too), an element-wise chain (bias, ReLU, BatchNorm, ...), one window reduction
``pool[n, f, p, q] = max|sum(pool, E(conv[n, f, p*K + rv0, q*K' + rv1]))`` whose stride equals its
window (non-overlapping windows, floor mode, no pool padding) and an optional element-wise tail (the
average's division). :func:`supports_pair` answers the same for the conv and pool PrimFuncs before
fusion, for a fusion policy.

Structure. The conv tile never leaves the chip and never goes through shared memory either: each
thread owns ``CV`` output channels x ``PHV x PWV`` whole pool windows, so it accumulates its
``CV x K*PHV x K'*PWV`` conv outputs in registers, applies the epilogue and the pool there, and
writes only pooled values. A block (``CT x PHT x PWT`` threads: pooled width fastest, then height,
then channel groups) loops over the input channels in chunks of ``RC``: it stages the input chunk
with its halo (the padding block computes straight into shared memory, whole rows per pass,
coalesced along W; rows padded to a pitch that keeps the threads' vector loads free of bank
conflicts) and the weights ``(CT*CV) x RC x KH x KW``, then each thread reads its input window once
per channel (rows vectorised by the compiler) and its weights (one address per channel group: a
broadcast) for ``CV x K*PHV x K'*PWV x KH x KW`` FMAs, unrolled over the window and ``unroll``
channels.

Tiles come from a cost model on the target's hardware profile (warp size, threads, shared memory,
registers, multiprocessors, issue rate, DRAM): issue slots of FMAs, shared loads and staging
against the shared-memory wavefronts of the actual lane addresses (bank conflicts simulated),
staging latency hidden by the other resident blocks, waves of blocks over the multiprocessors.
Registers are estimated from ptxas (sm_90; within 2 for the 64-accumulator tiles that come near
the limit) and kept at or below 128, where ptxas leaves a kernel alone (above, it squeezes the
kernel to the next occupancy step and spills). On an H200 (ptxas, nvcc 13): ``conv_relu_pool``
batch 1 gets 128 threads x 392 blocks, 71 registers, 11 KiB shared; batch 32 256 threads x 1568
blocks, 127 registers, 29 KiB shared; no spills. Not yet timed on a GPU: the model says 23 us and
0.52 ms (60% and 86% of FP32 peak), surely optimistic; its constants are estimates until a sweep
of tiles is timed.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
from typing import List, Optional, Sequence, Tuple

from tvm import s_tir, tirx
from tvm.ir import TensorLoad
from tvm.runtime import DataType
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.target import Target

from .common import (
    GPULimits,
    allocated_shared_bytes,
    const_int,
    gpu_limits,
    is_plain_spatial,
    is_reduction,
    linear_coefficients,
    mac_operands,
    only_coefficients,
    tensor_loads,
    trivially_bound,
    var_position,
)

SBlockRV = s_tir.schedule.SBlockRV


@dataclasses.dataclass(frozen=True)
class ConvPoolProblem:  # pylint: disable=too-many-instance-attributes
    """A matched convolution + pool: shapes, windows and where the conv's operands are."""

    batch: int
    in_channels: int
    out_channels: int
    pooled: Tuple[int, int]  # pooled rows, columns
    kernel: Tuple[int, int]  # conv KH, KW
    stride: Tuple[int, int]  # conv stride
    dilation: Tuple[int, int]
    window: Tuple[int, int]  # pool window = pool stride
    pool: str  # "max" or "sum" (an average divides in the tail)
    dtype_bytes: int
    data_read_index: int  # operand position of the data in the conv block's reads
    weight_read_index: int

    @property
    def flops(self) -> float:
        """FLOPs of the conv outputs the pool reads (2 per MAC)."""
        (ph, pw), (kh, kw), (wh, ww) = self.pooled, self.kernel, self.window
        return 2.0 * self.batch * self.out_channels * ph * wh * pw * ww * self.in_channels * kh * kw

    def input_extent(self, conv_rows: int, conv_cols: int) -> Tuple[int, int]:
        """Input rows and columns (halo included) that ``conv_rows x conv_cols`` outputs read."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        return (conv_rows - 1) * sh + (kh - 1) * dh + 1, (conv_cols - 1) * sw + (kw - 1) * dw + 1


@dataclasses.dataclass(frozen=True)
class ConvPoolTile:  # pylint: disable=too-many-instance-attributes
    """The tile one block computes, and what the cost model thought of it."""

    channels_per_thread: int  # CV
    thread_channels: int  # CT
    window_rows: int  # PHV: pool windows per thread along H
    thread_rows: int  # PHT
    window_cols: int  # PWV: pool windows per thread along W
    thread_cols: int  # PWT
    chunk: int  # RC: input channels staged per pass
    unroll: int  # input channels per unrolled step of the inner loop
    threads: int
    blocks: int
    blocks_per_multiprocessor: int  # resident, by threads, registers and shared memory
    shared_bytes: int
    registers_estimate: int
    accumulators: int  # conv outputs per thread
    input_load: Tuple[str, int]  # ("rows", lines per pass) or ("flat", 0)
    weight_load: Tuple[str, int]
    row_pitch: int  # words between rows of the staged input (padded against bank conflicts)
    lds_per_fma: float  # shared-load instructions per FMA
    wavefronts_per_fma: float  # shared-memory wavefronts per (warp) FMA instruction
    time_s: float  # modelled kernel time
    score: float  # modelled fraction of FP32 peak

    @property
    def channels(self) -> int:
        """Output channels per block."""
        return self.thread_channels * self.channels_per_thread

    @property
    def pooled_rows(self) -> int:
        """Pooled rows per block."""
        return self.thread_rows * self.window_rows

    @property
    def pooled_cols(self) -> int:
        """Pooled columns per block."""
        return self.thread_cols * self.window_cols


class ConvPool(GPUScheduleRule):
    """Conv2d (NCHW, groups = 1) + element-wise epilogue + non-overlapping max/avg pool, one kernel.

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
        max_accumulators : int
            Conv outputs a thread keeps in registers (``CV x K*PHV x K'*PWV``); 64 keeps ptxas
            below 128 registers with 3x3 kernels on sm_90.
        max_channels_per_thread : int
            Upper bound on ``CV``.
        max_chunk : int
            Upper bound on ``RC`` (input channels per staging pass).
        max_unrolled_fma, max_unroll : int
            FMAs and input channels in one unrolled step of the inner channel loop (instruction
            cache). Four channels already vectorise the weight loads of a 3x3 kernel; with eight,
            ptxas (sm_80 and sm_90) needed 96 registers for a 32-accumulator tile, squeezed it
            into 80 and spilled, where four gave 102-109 registers and no spill.
        max_registers : int
            Estimated registers per thread allowed. Seen with nvcc 13 on sm_90: given
            ``__launch_bounds__(256)`` ptxas squeezes a kernel that needs 96 or 168 registers into
            80 or 128 (for one more resident block) and spills; at 128 or below (the estimate is
            within 2 for the 64-accumulator tiles near it) ptxas leaves it alone.
        max_kernel, max_stride, max_window : int
            Largest conv kernel side, conv stride and pool window handled.
        max_attempts : int
            Ranked tiles tried before giving up, when TVM compacts a shared buffer to more than
            planned (an edge-tile guard it cannot see through).
        """

        min_threads: int = 64
        max_threads: int = 256
        max_accumulators: int = 64
        max_channels_per_thread: int = 8
        max_chunk: int = 32
        max_unrolled_fma: int = 2304
        max_unroll: int = 4
        max_registers: int = 128
        max_kernel: int = 7
        max_stride: int = 2
        max_window: int = 4
        max_attempts: int = 8

    def get_config(self, target: Target) -> "ConvPool.Config":
        """The search bounds for ``target``'s kind."""
        if target.kind.name == "rocm":
            # wave64; at most 256 work-items: TVM 0.27's AMDGPU codegen, built without an AMD GPU
            # present, compiles every kernel for a work-group of at most 256 (see
            # tvm_fusion_hw.kernel_resources), whatever the target says.
            return ConvPool.Config(min_threads=64, max_threads=256)
        return ConvPool.Config()

    # ---- the rule ------------------------------------------------------------------------------
    def apply(
        self,
        func: tirx.PrimFunc,
        target: Target,
        _: bool,
    ) -> Optional[s_tir.Schedule]:
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        planned = self._schedule_best(func, target)
        return None if planned is None else planned[2]

    def plan(
        self, func: tirx.PrimFunc, target: Target
    ) -> Optional[Tuple[ConvPoolProblem, ConvPoolTile]]:
        """The problem the rule sees in ``func`` and the tile it uses, or ``None``."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        planned = self._schedule_best(func, target)
        return None if planned is None else planned[:2]

    def schedule_tile(
        self, func: tirx.PrimFunc, target: Target, tile: ConvPoolTile
    ) -> Optional[s_tir.Schedule]:
        """``func`` scheduled with a given ``tile`` (one of :func:`rank_tiles`, or made by
        :func:`evaluate_tile`); None when ``func`` is not this rule's pattern or the tile fails."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        matched = _match_and_inline(sch, self.get_config(target))
        if matched is None:
            return None
        problem, pad, conv, pool, tail = matched
        try:
            _schedule(sch, problem, tile, pad, conv, pool, tail)
        except RuntimeError:  # ScheduleError, InternalError
            return None
        return sch

    def _schedule_best(
        self, func: tirx.PrimFunc, target: Target
    ) -> Optional[Tuple[ConvPoolProblem, ConvPoolTile, s_tir.Schedule]]:
        config = self.get_config(target)
        limits = gpu_limits(target)

        # Step 1. Match pad -> conv -> element-wise -> pool -> element-wise; inline the chains.
        matched = _match_and_inline(s_tir.Schedule(func), config)
        if matched is None:
            return None

        # Step 2. Rank the tiles on the hardware profile.
        tiles = rank_tiles(matched[0], limits, config)

        # Step 3. Schedule the best tile whose shared buffers TVM compacts to the planned size;
        # failing that, the first whose compacted buffers still fit a block.
        fallback = None
        for tile in tiles[: config.max_attempts]:
            sch = s_tir.Schedule(func)
            problem, pad, conv, pool, tail = _match_and_inline(sch, config)  # type: ignore[misc]
            try:
                _schedule(sch, problem, tile, pad, conv, pool, tail)
                allocated = allocated_shared_bytes(sch.mod["main"])
            except RuntimeError:  # ScheduleError, or an InternalError of a TVM pass
                continue
            if allocated <= tile.shared_bytes:
                return problem, tile, sch
            if fallback is None and allocated <= limits.shared_memory_bytes_per_block:
                fallback = (problem, dataclasses.replace(tile, shared_bytes=allocated), sch)
        return fallback


# ---- matching --------------------------------------------------------------------------------
def _match_and_inline(  # pylint: disable=too-many-return-statements,too-many-branches
    sch: s_tir.Schedule, config: "ConvPool.Config"
) -> Optional[Tuple[ConvPoolProblem, Optional[SBlockRV], SBlockRV, SBlockRV, Optional[SBlockRV]]]:
    """Find the conv, its padding producer, the pool and the pool's tail; inline all other blocks.

    Returns ``(problem, pad, conv, pool, tail)`` (``pad``/``tail`` may be None) or None.
    """
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    reductions = [b for b in sch.get_child_blocks(root) if is_reduction(sch.get(b))]
    if len(reductions) != 2:
        return None
    conv, pool = reductions
    conv_shape = _match_conv(sch, conv, config)
    if conv_shape is None:
        return None
    conv_stmt = sch.get(conv)
    data = conv_stmt.reads[conv_shape[-2]].source
    weight = conv_stmt.reads[conv_shape[-1]].source

    # The data may come from one spatial block (the padding); the weights from none.
    pad = None
    for producer in sch.get_producers(conv):
        written = [r.source for r in sch.get(producer).writes]
        if any(b.same_as(weight) for b in written):
            return None
        if any(b.same_as(data) for b in written):
            if not is_plain_spatial(sch.get(producer), data):
                return None
            pad = producer

    # Inline every other block: prologues into the padding, the epilogue chain into the pool,
    # all but the last step of the tail into its last step.
    keep = [conv, pool] + ([pad] if pad is not None else [])

    def kept(block: SBlockRV) -> bool:
        return any(sch.get(block).same_as(sch.get(k)) for k in keep)

    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root):
            if kept(block):
                continue
            try:
                sch.compute_inline(block)
                changed = True
            except RuntimeError:  # ScheduleError: not inlinable
                continue
    rest = [b for b in sch.get_child_blocks(root) if not kept(b)]
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
    if pooled is None:
        return None
    batch, out_ch, in_ch, kernel, stride, dilation, _, data_idx, weight_idx = conv_shape
    pooled_hw, window, kind = pooled
    problem = ConvPoolProblem(
        batch=batch,
        in_channels=in_ch,
        out_channels=out_ch,
        pooled=pooled_hw,
        kernel=kernel,
        stride=stride,
        dilation=dilation,
        window=window,
        pool=kind,
        dtype_bytes=max(1, DataType(str(data.dtype)).bits // 8),
        data_read_index=data_idx,
        weight_read_index=weight_idx,
    )
    return problem, pad, conv, pool, tail


def supports_pair(producer: tirx.PrimFunc, consumer: tirx.PrimFunc) -> bool:
    """Whether ConvPool would take ``producer`` (a conv and its epilogue, as one PrimFunc) fused
    with ``consumer`` (a pool PrimFunc), judged on the two before fusion.

    For a fusion policy: fusing a pair this rule then declines leaves dlight a conv and a pool in
    one PrimFunc, which it can only split into two untiled kernels. The producer must hold one
    conv this rule matches (groups = 1, its limits on kernel and stride), the consumer one window
    reduction of its input with stride = window, no padding and floor mode.
    """
    config = ConvPool.Config()
    if not isinstance(producer, tirx.PrimFunc) or not isinstance(consumer, tirx.PrimFunc):
        return False
    try:
        sch = s_tir.Schedule(producer)
        convs = [b for b in sch.get_child_blocks(get_root_block(sch)) if is_reduction(sch.get(b))]
        if len(convs) != 1 or _match_conv(sch, convs[0], config) is None:
            return False
        sch = s_tir.Schedule(consumer)
        root = get_root_block(sch)
        pools = [b for b in sch.get_child_blocks(root) if is_reduction(sch.get(b))]
        if len(pools) != 1:
            return False
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
        return len(inputs) == 1 and _match_pool(sch, pools[0], inputs[0], config) is not None
    except RuntimeError:  # ScheduleError, InternalError
        return False


def _match_conv(  # pylint: disable=too-many-locals,too-many-return-statements
    sch: s_tir.Schedule, conv: SBlockRV, config: "ConvPool.Config"
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
    config: "ConvPool.Config",
) -> Optional[Tuple[Tuple[int, int], Tuple[int, int], str]]:
    """Match ``pool[n,f,p,q] = max|sum(pool[...], E)`` where every read of ``source`` (the conv
    output, shape ``[N, F, H, W]``) in ``E`` is ``source[n, f, p*K + rv0, q*K' + rv1]`` over a
    ``K x K'`` window: stride = window, no padding, every window inside ``H x W`` (floor mode).

    Returns ``((pooled rows, pooled cols), (K, K'), "max" | "sum")`` or None.
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
    for ld in reads:
        coeffs = [linear_coefficients(i, ivars) for i in ld.indices]
        if not (
            only_coefficients(coeffs[0], {n: 1})
            and only_coefficients(coeffs[1], {f: 1})
            and only_coefficients(coeffs[2], {p: window[0], r0: 1})
            and only_coefficients(coeffs[3], {q: window[1], r1: 1})
        ):
            return None
    # Floor mode: every window lies inside the conv output (ceil mode pads, and is refused).
    shape = [const_int(d) for d in source.shape]
    if len(shape) != 4 or shape[:2] != [ext[n], ext[f]]:
        return None
    if ext[p] * window[0] > shape[2] or ext[q] * window[1] > shape[3]:
        return None
    return (ext[p], ext[q]), window, kind


# ---- tile choice -----------------------------------------------------------------------------
#: Shared memory serves one 128-byte wavefront per clock while the multiprocessor issues 4 warp
#: instructions (NVIDIA sm_80/sm_90: 4 schedulers; AMD CDNA: 128 B/clk against 128 FP32 lanes).
_SLOTS_PER_WAVEFRONT = 4
_BANKS = 32  # 4-byte banks (NVIDIA; AMD CDNA LDS has 32 too)
#: Issue slots per element of a staging pass: whole rows per pass (offsets computed once per
#: thread) or one flat index (a div/mod per element); padding predicate, load and store included.
_LOAD_INSTR = {"rows": 8, "flat": 20}
#: Per staging pass: two barriers and the loop; and the latency of its global loads, which only
#: the other resident blocks' compute hides (one barrier per pass in each block).
_PASS_INSTR = 40
_PASS_LATENCY_S = 0.6e-6
_LAUNCH_S = 3e-6
#: A tile that does not divide the output guards its loads and stores (measured 1.3x for the
#: depthwise rule on an H200; assumed the same here).
_PARTIAL_TILE_ISSUE_FACTOR = 1.3
#: Issue efficiency against resident warps per scheduler (shared-load latency and the FMA
#: dependency chains of a warp): ``min(1, base + per_warp * warps)``. Estimates, not measured.
_ISSUE_EFFICIENCY = (0.75, 0.0625)
_SCHEDULERS_PER_MULTIPROCESSOR = 4
#: Registers besides the accumulators and the input window: addresses, counters, the epilogue.
_REGISTER_BASE = 24
_UNROLL_REGISTERS = 8


def _registers(problem: ConvPoolProblem, cv: int, rows: int, cols: int, unroll: int) -> int:
    """Registers per thread: the ``cv x rows x cols`` accumulators, the input window of one
    channel (two, and a few more registers, when the channel loop is unrolled: the compiler loads
    ahead), the ``cv`` weights of a tap and addressing. Fitted to ptxas (nvcc 13, sm_90, 3x3 conv,
    2x2 pool, 37 tiles of 4 to 128 accumulators): within 2 for 64 accumulators and one channel per
    step, the tiles the 128-register budget is about; tiles of 4 to 32 accumulators with unrolled
    steps land between 21 below and 40 above (nvcc unrolls the channel loop further on its own and
    ptxas hoists loads across it), far from any limit."""
    win_rows, win_cols = problem.input_extent(rows, cols)
    ahead = 0 if unroll == 1 else win_rows * win_cols + _UNROLL_REGISTERS
    return cv * rows * cols + win_rows * win_cols + ahead + cv + _REGISTER_BASE


def _divisors(value: int, limit: int) -> List[int]:
    return [d for d in range(1, min(value, limit) + 1) if value % d == 0]


def _splits(value: int, limit: int) -> List[int]:
    """Threads along an axis of ``value`` items: its divisors, then ceil(value / k) and powers
    of two, which leave a partial edge tile (guarded)."""
    cands = set(_divisors(value, limit))
    cands.update(math.ceil(value / k) for k in range(1, 9))
    cands.update(1 << i for i in range(0, 11) if (1 << i) < value)
    return sorted(c for c in cands if 1 <= c <= min(value, limit))


def _load_plan(lines: int, line: int, threads: int) -> Tuple[Tuple[str, int], int]:
    """How a block stages ``lines`` contiguous runs of ``line`` elements with ``threads`` threads:
    ``((mode, lines per pass), issue slots per thread)``."""
    per_pass = threads // line
    if per_pass >= 1:
        return ("rows", per_pass), math.ceil(lines / per_pass) * _LOAD_INSTR["rows"]
    return ("flat", 0), math.ceil(lines * line / threads) * _LOAD_INSTR["flat"]


def _pieces(length: int, width: int) -> List[Tuple[int, int]]:
    """``(offset, width)`` of the vector loads covering ``length`` words from an address aligned
    to ``width`` words (the compiler vectorises as far as alignment allows)."""
    out, k = [], 0
    while k < length:
        w = width
        while w > length - k or k % w:
            w //= 2
        out.append((k, w))
        k += w
    return out


def _alignment(*strides: int) -> int:
    """Vector width (words) the compiler can prove for addresses that step by ``strides``."""
    g = 0
    for stride in strides:
        g = math.gcd(g, stride)
    return next(w for w in (4, 2, 1) if g % w == 0)


def _load_wavefronts(starts: Sequence[int], pieces: Sequence[Tuple[int, int]], banks: int) -> int:
    """Shared-memory wavefronts of one warp reading ``pieces`` from per-lane word ``starts``:
    per 32 lanes, as many as the most distinct words any bank holds (equal words are one
    broadcast). So 32 lanes reading 16 distinct bytes each take at least 4, and a 128-bit
    broadcast takes 1."""
    total = 0
    for offset, width in pieces:
        for first in range(0, len(starts), banks):
            words = {
                s + k for s in starts[first:first + banks] for k in range(offset, offset + width)
            }
            total += max(collections.Counter(w % banks for w in words).values())
    return total


@functools.lru_cache(maxsize=None)
def _row_reads(lanes: Tuple[Tuple[int, int], ...], step: Tuple[int, int], win_cols: int,
               pitch: int) -> Tuple[int, int]:
    """``(LDS instructions, wavefronts)`` of a warp whose lanes sit at ``lanes`` (thread row,
    thread column) reading one row of their input windows from rows ``pitch`` words apart."""
    starts = [i * step[0] * pitch + j * step[1] for i, j in lanes]
    pieces = _pieces(win_cols, _alignment(pitch, step[1]))
    return len(pieces), _load_wavefronts(starts, pieces, _BANKS)


@functools.lru_cache(maxsize=None)
def _input_reads(  # pylint: disable=too-many-arguments
    warp: int, pht: int, pwt: int, step: Tuple[int, int], win_cols: int, in_cols: int,
) -> Tuple[int, int, int]:
    """How a warp reads one row of its threads' input windows: ``(row pitch, LDS instructions,
    wavefronts)`` for the best pitch from ``in_cols`` up (the padding that removes bank conflicts
    while keeping the rows vectorisable). ``step`` is the input offset between neighbouring
    threads along H (rows) and W (columns)."""
    lanes = tuple(((t % (pht * pwt)) // pwt, t % pwt) for t in range(warp))
    best = None
    align = _alignment(step[1])
    for pitch in range(in_cols, in_cols + _BANKS):
        if pitch != in_cols and pitch % align:
            continue  # a pitch that breaks the rows' vector alignment
        # Conflicts repeat with the pitch modulo the banks, alignment modulo 4.
        instructions, wavefronts = _row_reads(lanes, step, win_cols, _BANKS + pitch % _BANKS)
        cost = (wavefronts, instructions, pitch)
        if best is None or cost < best:
            best = cost
    wavefronts, instructions, pitch = best  # type: ignore[misc]
    return pitch, instructions, wavefronts


@functools.lru_cache(maxsize=4096)
def _weight_reads(
    warp: int, group_lanes: int, group_stride: int, run: int, align: int
) -> Tuple[int, int]:
    """``(LDS instructions, wavefronts)`` of a warp reading one channel's ``run`` contiguous weights
    per thread, where lanes of one channel group share the address and groups lie
    ``group_stride`` words apart."""
    starts = [(t // group_lanes) * group_stride for t in range(warp)]
    pieces = _pieces(run, align)
    return len(pieces), _load_wavefronts(starts, pieces, _BANKS)


def evaluate_tile(  # pylint: disable=too-many-arguments,too-many-locals
    problem: ConvPoolProblem,
    limits: GPULimits,
    config: "ConvPool.Config",
    shape: Tuple[int, int, int, int, int, int],
    chunk: int,
) -> Optional[ConvPoolTile]:
    """Cost one tile, or None when it breaks a limit.

    ``shape`` is ``(CV, CT, PHV, PHT, PWV, PWT)`` and ``chunk`` the input channels per staging
    pass. Per pass, a block's warps need ``max(issue, shared memory)`` slots of their
    multiprocessor: issue counts the FMAs, the shared loads (vectorised by four) and the staging;
    shared memory counts the wavefronts, where the lanes of a warp that share a pixel (input) or a
    channel group (weights) read one broadcast. Issue runs at an efficiency that grows with the
    resident warps. A pass also waits for its staging latency, which the other resident blocks'
    compute hides. Blocks go to the multiprocessors in waves; the busiest one sets the time, which
    DRAM traffic bounds from below; ``score`` is the fraction of FP32 peak.
    """
    cv, ct, phv, pht, pwv, pwt = shape
    (kh, kw), (wh, ww) = problem.kernel, problem.window
    threads = ct * pht * pwt
    if threads % limits.warp_size or not config.min_threads <= threads <= config.max_threads:
        return None
    if threads > limits.max_threads_per_block:
        return None
    rows, cols = wh * phv, ww * pwv  # conv outputs per thread
    acc = cv * rows * cols
    taps = kh * kw
    budget = min(config.max_registers, limits.max_registers_per_thread,
                 limits.registers_per_multiprocessor // threads)
    unrolls = [
        u for u in _divisors(chunk, config.max_unroll)
        if (u == 1 or u * taps * acc <= config.max_unrolled_fma)
        and _registers(problem, cv, rows, cols, u) <= budget
    ]
    if acc > config.max_accumulators or not unrolls:
        return None
    unroll = unrolls[-1]
    regs = _registers(problem, cv, rows, cols, unroll)
    in_rows, in_cols = problem.input_extent(rows * pht, cols * pwt)
    win_rows, win_cols = problem.input_extent(rows, cols)
    (sh, sw) = problem.stride
    pitch, in_instr, in_wavefronts = _input_reads(
        limits.warp_size, pht, pwt, (rows * sh, cols * sw), win_cols, in_cols)
    smem = problem.dtype_bytes * chunk * (in_rows * pitch + ct * cv * taps)
    if smem > limits.shared_memory_bytes_per_block:
        return None

    blocks = (
        problem.batch
        * math.ceil(problem.out_channels / (ct * cv))
        * math.ceil(problem.pooled[0] / (pht * phv))
        * math.ceil(problem.pooled[1] / (pwt * pwv))
    )
    reg_alloc = int(math.ceil(regs / 8.0) * 8)
    resident = min(
        limits.max_threads_per_multiprocessor // threads,
        limits.shared_memory_bytes_per_multiprocessor
        // (smem + limits.shared_memory_reserved_bytes_per_block),
        limits.max_blocks_per_multiprocessor,
        limits.registers_per_multiprocessor // (threads * reg_alloc),
    )
    if resident < 1:
        return None

    # One staging pass of one block: issue and shared-memory slots of its multiprocessor.
    warps = threads // limits.warp_size
    input_load, input_instr = _load_plan(chunk * in_rows, in_cols, threads)
    weight_load, weight_instr = _load_plan(ct * cv, chunk * taps, threads)
    fma = chunk * taps * acc
    # Per input channel: the window's rows, and each of the thread's channels' taps (vectorised
    # over the unrolled channels' taps, as far as alignment allows).
    w_instr, w_wavefronts = _weight_reads(
        limits.warp_size, pht * pwt, cv * chunk * taps, unroll * taps,
        _alignment(chunk * taps, unroll * taps))
    lds_instr = chunk * (win_rows * in_instr + cv * w_instr / unroll)
    issue = fma + lds_instr + input_instr + weight_instr + _PASS_INSTR
    if (
        problem.out_channels % (ct * cv)
        or problem.pooled[0] % (pht * phv)
        or problem.pooled[1] % (pwt * pwv)
    ):
        issue *= _PARTIAL_TILE_ISSUE_FACTOR
    shared = _SLOTS_PER_WAVEFRONT * chunk * (win_rows * in_wavefronts + cv * w_wavefronts / unroll)
    slots_per_s = limits.warp_instructions_per_s / limits.multiprocessor_count
    per_sm = math.ceil(blocks / limits.multiprocessor_count)  # the busiest multiprocessor
    resident_warps = min(resident, per_sm) * warps
    efficiency = min(1.0, _ISSUE_EFFICIENCY[0] + _ISSUE_EFFICIENCY[1] * resident_warps
                     / _SCHEDULERS_PER_MULTIPROCESSOR)
    compute_s = warps * max(issue / efficiency, shared) / slots_per_s
    passes = math.ceil(problem.in_channels / chunk)

    def round_time(active: int) -> float:
        return passes * max(active * compute_s, compute_s + _PASS_LATENCY_S)

    time = (per_sm // resident) * round_time(resident)
    if per_sm % resident:
        time += round_time(per_sm % resident)
    ph, pw = problem.pooled
    dram_bytes = problem.dtype_bytes * problem.batch * (
        problem.in_channels * (ph * wh * sh) * (pw * ww * sw) + problem.out_channels * ph * pw
    )
    time = max(time, dram_bytes / limits.dram_bytes_per_s) + _LAUNCH_S
    peak = limits.warp_instructions_per_s * 2 * limits.warp_size
    return ConvPoolTile(
        channels_per_thread=cv,
        thread_channels=ct,
        window_rows=phv,
        thread_rows=pht,
        window_cols=pwv,
        thread_cols=pwt,
        chunk=chunk,
        unroll=unroll,
        threads=threads,
        blocks=blocks,
        blocks_per_multiprocessor=resident,
        shared_bytes=smem,
        registers_estimate=regs,
        accumulators=acc,
        input_load=input_load,
        weight_load=weight_load,
        row_pitch=pitch,
        lds_per_fma=lds_instr / fma,
        wavefronts_per_fma=shared / _SLOTS_PER_WAVEFRONT / fma,
        time_s=time,
        score=problem.flops / peak / time,
    )


def rank_tiles(
    problem: ConvPoolProblem, limits: GPULimits, config: "ConvPool.Config"
) -> List[ConvPoolTile]:
    """The tiles allowed by ``limits`` and ``config``, best first (see :func:`evaluate_tile`).

    Channels per thread and chunks divide the channel counts; threads per pooled axis are its
    divisors or leave a guarded edge tile (costed). Scores within 0.005 tie (the model is not
    finer than that); ties go to fewer shared loads, then wavefronts, per FMA, then to fewer
    passes (larger chunks), fewer registers and fewer threads.
    """
    (ph, pw), c_out = problem.pooled, problem.out_channels
    (wh, ww), warp = problem.window, limits.warp_size
    max_threads = min(config.max_threads, limits.max_threads_per_block)
    chunks = _divisors(problem.in_channels, config.max_chunk)
    ranked = []
    for cv, phv, pwv in itertools.product(
        _divisors(c_out, config.max_channels_per_thread),
        range(1, min(ph, 4) + 1),
        range(1, min(pw, 4) + 1),
    ):
        if cv * wh * phv * ww * pwv > config.max_accumulators:
            continue
        for ct in _divisors(c_out // cv, max_threads):
            for pht in _splits(math.ceil(ph / phv), max_threads // ct):
                for pwt in _splits(math.ceil(pw / pwv), max_threads // (ct * pht)):
                    threads = ct * pht * pwt
                    if threads % warp or threads < config.min_threads:
                        continue
                    for chunk in chunks:
                        shape = (cv, ct, phv, pht, pwv, pwt)
                        tile = evaluate_tile(problem, limits, config, shape, chunk)
                        if tile is not None:
                            key = (round(tile.score, 2), -tile.lds_per_fma,
                                   -tile.wavefronts_per_fma, tile.chunk,
                                   -tile.registers_estimate, -tile.threads)
                            ranked.append((key, tile))
    ranked.sort(key=lambda item: item[0], reverse=True)
    return [tile for _, tile in ranked]


# ---- the schedule ----------------------------------------------------------------------------
def _cooperative(sch: s_tir.Schedule, loops: list, plan: Tuple[str, int], threads: int) -> None:
    """Spread a staging block's ``loops`` (lines ..., then the contiguous run) over the threads."""
    mode, per_pass = plan
    if mode == "rows":
        outer, lines_i = sch.split(sch.fuse(*loops[:-1]), [None, per_pass])
        _, lane = sch.split(sch.fuse(lines_i, loops[-1]), [1, threads])
    else:
        outer, lane = sch.split(sch.fuse(*loops), [None, threads])
    sch.bind(lane, "threadIdx.x")
    sch.unroll(outer)


def _schedule(  # pylint: disable=too-many-arguments,too-many-locals
    sch: s_tir.Schedule,
    problem: ConvPoolProblem,
    tile: ConvPoolTile,
    pad: Optional[SBlockRV],
    conv: SBlockRV,
    pool: SBlockRV,
    tail: Optional[SBlockRV],
) -> None:
    """Apply ``tile`` to the matched group (see the module docstring for the structure)."""
    tile_rows = problem.window[0] * tile.pooled_rows
    tile_cols = problem.window[1] * tile.pooled_cols

    # Step 3a. Tile the pooled output: block = (n, channel tile, row tile, column tile); threads =
    # (channel group, window row, window column); each thread CV x PHV x PWV pool windows.
    n, c, p, q, rv0, rv1 = sch.get_loops(pool)
    c_o, c_t, c_v = sch.split(c, [None, tile.thread_channels, tile.channels_per_thread])
    p_o, p_t, p_v = sch.split(p, [None, tile.thread_rows, tile.window_rows])
    q_o, q_t, q_v = sch.split(q, [None, tile.thread_cols, tile.window_cols])
    sch.reorder(n, c_o, p_o, q_o, c_t, p_t, q_t, c_v, p_v, q_v, rv0, rv1)
    bx = sch.fuse(n, c_o, p_o, q_o)
    tx = sch.fuse(c_t, p_t, q_t)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")

    # Step 3b. The pooled values in registers; the tail (an average's division) on the way out.
    out = sch.cache_write(pool, 0, "local")
    if tail is not None:
        sch.reverse_compute_inline(tail)
    sch.reverse_compute_at(out, tx, preserve_unit_loops=True)

    # Step 3c. The thread's conv outputs in registers, computed right before its pool windows
    # (the epilogue was inlined into the pool: it runs on the registers too).
    sch.set_scope(conv, 0, "local")
    sch.compute_at(conv, tx, preserve_unit_loops=True)
    conv_loops = sch.get_loops(conv)[-7:]
    spatial, (rc, ry, rx) = conv_loops[:4], conv_loops[4:]
    rc_o, rc_m, rc_u = sch.split(rc, [None, tile.chunk // tile.unroll, tile.unroll])
    sch.reorder(rc_o, rc_m, rc_u, ry, rx, *spatial)

    # Step 3d. Stage the input chunk (the padding block computes into shared memory) and the
    # weights in shared memory, all threads together, consecutive threads along a row.
    if pad is None:
        pad = sch.cache_read(conv, problem.data_read_index, "shared")
    else:
        sch.set_scope(pad, 0, "shared")
    sch.compute_at(pad, rc_o, preserve_unit_loops=True)
    _, in_cols = problem.input_extent(tile_rows, tile_cols)
    ndim = len(sch.get(pad).writes[0].region)
    if tile.row_pitch != in_cols:
        sch.storage_align(pad, 0, ndim - 2, _BANKS, tile.row_pitch % _BANKS)
    _cooperative(sch, sch.get_loops(pad)[-4:], tile.input_load, tile.threads)
    weight = sch.cache_read(conv, problem.weight_read_index, "shared")
    sch.compute_at(weight, rc_o, preserve_unit_loops=True)
    w_f, w_c, w_y, w_x = sch.get_loops(weight)[-4:]
    _cooperative(sch, [w_f, sch.fuse(w_c, w_y, w_x)], tile.weight_load, tile.threads)

    # Step 3e. Unroll the register tiles; zero the accumulators before the channel loop.
    for loop in [rc_u, ry, rx, *spatial]:
        sch.unroll(loop)
    for loop in sch.get_loops(pool)[2:] + sch.get_loops(out)[2:]:
        sch.unroll(loop)
    sch.decompose_reduction(conv, rc_o)
    sch.decompose_reduction(pool, sch.get_loops(pool)[5])
