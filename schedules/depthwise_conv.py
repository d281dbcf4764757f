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

import dataclasses
import math
from typing import List, Optional, Tuple

from tvm import s_tir, tirx
from tvm.runtime import DataType
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target

from .common import (GPULimits, TiledScheduleRule, const_int, is_plain_spatial,
                     is_reduction, linear_coefficients, mac_operands, only_coefficients, trivially_bound,
                     var_position)

SBlockRV = s_tir.schedule.SBlockRV


@dataclasses.dataclass(frozen=True)
class DepthwiseProblem:  # pylint: disable=too-many-instance-attributes
    """A matched depthwise convolution: output shape, window and where its operands are."""

    batch: int
    channels: int
    height: int  # output rows
    width: int  # output columns
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    dilation: Tuple[int, int]
    dtype_bytes: int
    data_read_index: int  # operand position of the data in the conv block's reads
    weight_read_index: int

    @property
    def outputs(self) -> int:
        """Output elements."""
        return self.batch * self.channels * self.height * self.width

    def input_extent(self, out_rows: int, out_cols: int) -> Tuple[int, int]:
        """Input rows and columns (halo included) that ``out_rows x out_cols`` outputs read."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        return (out_rows - 1) * sh + (kh - 1) * dh + 1, (out_cols - 1) * sw + (kw - 1) * dw + 1


@dataclasses.dataclass(frozen=True)
class DepthwiseTile:  # pylint: disable=too-many-instance-attributes
    """The tile one block computes, and what the cost model thought of it."""

    channels: int  # TC: channels per block
    thread_rows: int  # TY: rows of threads
    rows_per_thread: int  # VH: vertically adjacent outputs per thread
    cols: int  # TW: columns per block, one thread each
    threads: int
    blocks: int
    shared_bytes: int
    registers_estimate: int
    load_mode: str  # shared load: "rows" or "flat" (see _load_plan)
    load_rows_per_pass: int  # input rows per pass of a "rows" load
    lane_utilisation: float  # useful outputs / outputs the launched lanes could compute
    read_efficiency: float  # input elements needed once / input elements staged (halo)
    memory_efficiency: float  # sector use of the global reads and writes, halo included
    wave_efficiency: float  # waves / ceil(waves) over the resident block slots
    time_s: float  # modelled kernel time
    score: float  # modelled fraction of peak DRAM bandwidth

    @property
    def rows(self) -> int:
        """TH: output rows per block."""
        return self.thread_rows * self.rows_per_thread

    def summary(self) -> str:
        """The tile in words, for reports."""
        return (f"{self.channels} channels x {self.rows}x{self.cols} outputs a block, {self.threads} threads, "
                f"{self.rows_per_thread} outputs a thread, input tile with halo in shared memory "
                f"({self.shared_bytes} B), {self.blocks} blocks, model {self.time_s * 1e6:.1f} us")


class DepthwiseConv(TiledScheduleRule):
    """Depthwise conv2d (NCHW, weights [C, 1, KH, KW]) + element-wise epilogue, tiled in shared memory.

    Returns ``None`` for any PrimFunc that is not exactly one such convolution (with an optional
    padding producer and one injective epilogue chain), so that dlight's rules take it.
    """

    @dataclasses.dataclass
    class Config:  # pylint: disable=too-many-instance-attributes
        """Tile-search bounds; the hardware figures come from the target, not from here.

        Attributes
        ----------
        min_threads, max_threads : int
            Threads per block; ``max_threads`` is kept low enough that several blocks share an SM
            and one block's load phase overlaps another's compute (there is one barrier per block).
        max_outputs_per_thread : int
            Upper bound on ``VH`` (register accumulators per thread).
        preferred_outputs_per_thread : int
            Tie-break towards this ``VH``.
        max_channels_per_block : int
            Upper bound on ``TC`` (several channels per block for small planes, e.g. 7x7).
        max_tile_cols : int
            Upper bound on ``TW``.
        min_occupancy : float
            Fraction of an SM's threads that must be able to stay resident under the register
            estimate: bounds registers per thread.
        max_kernel : int
            Largest KH or KW handled (windows are fully unrolled).
        max_stride : int
            Largest stride handled.
        sector_bytes : int
            Granule of a global memory access (32-byte sectors on NVIDIA, 64-byte lines on AMD).
        max_attempts : int
            Ranked tiles tried before giving up, when TVM compacts a tile's shared buffer to more
            than planned (an edge-tile guard it cannot see through).
        """

        min_threads: int = 64
        max_threads: int = 256
        max_outputs_per_thread: int = 8
        preferred_outputs_per_thread: int = 4
        max_channels_per_block: int = 64
        max_tile_cols: int = 128
        min_occupancy: float = 0.5
        max_kernel: int = 7
        max_stride: int = 2
        sector_bytes: int = 32
        max_attempts: int = 16

    def get_config(self, target: Target) -> "DepthwiseConv.Config":
        """The search bounds for ``target``'s kind."""
        if target.kind.name == "rocm":
            # wave64 and 64-byte lines. At most 256 threads: TVM 0.27's AMDGPU codegen, built
            # without an AMD GPU present, compiles every kernel for a work-group of at most 256
            # (see tvm_fusion_hw.kernel_resources), whatever the target says.
            return DepthwiseConv.Config(min_threads=64, max_threads=256, sector_bytes=64)
        return DepthwiseConv.Config()

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


def _match_and_inline(  # pylint: disable=too-many-branches
    sch: s_tir.Schedule, config: "DepthwiseConv.Config"
) -> Optional[Tuple[DepthwiseProblem, SBlockRV, Optional[SBlockRV], Optional[SBlockRV]]]:
    """Find the convolution, its padding producer and its epilogue; inline all other blocks.

    Returns ``(problem, conv, pad, epilogue)`` (``pad``/``epilogue`` may be None) or None.
    """
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    blocks = sch.get_child_blocks(root)
    reductions = [b for b in blocks if is_reduction(sch.get(b))]
    if len(reductions) != 1:
        return None
    conv = reductions[0]
    problem = _match_depthwise(sch, conv, config)
    if problem is None:
        return None
    conv_stmt = sch.get(conv)
    data = conv_stmt.reads[problem.data_read_index].source
    weight = conv_stmt.reads[problem.weight_read_index].source

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

    # Inline every other block into its consumer (prologues into the padding, constants
    # and parameter reshapes into the epilogue, epilogue steps into the last one).
    keep = [conv] + ([pad] if pad is not None else [])
    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root):
            if any(sch.get(block).same_as(sch.get(k)) for k in keep):
                continue
            try:
                sch.compute_inline(block)
                changed = True
            except ScheduleError:
                continue
    rest = [
        b
        for b in sch.get_child_blocks(root)
        if not any(sch.get(b).same_as(sch.get(k)) for k in keep)
    ]
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


def _match_depthwise(  # pylint: disable=too-many-locals,too-many-return-statements,too-many-branches
    sch: s_tir.Schedule, conv: SBlockRV, config: "DepthwiseConv.Config"
) -> Optional[DepthwiseProblem]:
    """Match ``out[n,c,h,w] += data[n, c(+rc), h*sh+kh*dh, w*sw+kw*dw] * weight[c, rc|0, kh, kw]``.

    Iterators are compared by position in the block; ``rc`` (and any other reduction iterator
    beyond ``kh`` and ``kw``) must have extent 1, which is the group-conv form of a depthwise conv.
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


# ---- tile choice -----------------------------------------------------------------------------
def _registers(problem: DepthwiseProblem, rows_per_thread: int) -> int:
    """Registers per thread: accumulators, weights, one window row, addressing.

    The compiler walks the input rows of a thread's column window once (loads are deduplicated)
    and keeps only one row live, so the window does not count whole; the constant is calibrated
    on ptxas for sm_90 (26 to 32 registers for VH 1 to 8 with 3x3 windows).
    """
    (kh, kw) = problem.kernel
    return rows_per_thread + kh * kw + kw + 13


def _col_candidates(width: int, config: "DepthwiseConv.Config") -> List[int]:
    """TW: the full width, even fractions of it, and powers of two up to the next above it."""
    cands = set()
    if width <= config.max_tile_cols:
        cands.add(width)
    for parts in (2, 3, 4, 7, 8):
        if width % parts == 0 and 4 <= width // parts <= config.max_tile_cols:
            cands.add(width // parts)
    pow2 = 4
    while pow2 <= config.max_tile_cols and pow2 < 2 * width:
        cands.add(pow2)
        pow2 *= 2
    return sorted(cands)


#: Issued instructions per thread, calibrated on the PTX of the MobileNetV2 kernels (sm_90): per
#: pass of the shared-memory load (whole rows of one channel per pass: offsets computed once per
#: thread; one flat index: a div/mod per element, two more with several channels), per output
#: (bias, store, guard) and per thread.
_LOAD_PASS_INSTR = {"rows": 5, "flat": 23, "flat_channels": 38}
_OUTPUT_INSTR = 4
_THREAD_INSTR = 40
#: Measured on an H200: a row or channel tile that does not divide the plane guards every
#: unrolled tap in every block and costs 25-35% more (1.3x); a launch costs about 3 us.
_PARTIAL_TILE_ISSUE_FACTOR = 1.3
_LAUNCH_S = 3e-6


def _sector_efficiency(run_bytes: int, sector: int) -> float:
    """Useful fraction of the memory sectors a contiguous run touches (one extra: misalignment)."""
    return run_bytes / (sector * (math.ceil(run_bytes / sector) + 1))


def _load_plan(tc: int, in_rows: int, in_cols: int, threads: int) -> Tuple[str, int, int]:
    """How the block stages its input tile: ``(mode, rows per pass, instructions per thread)``.

    ``"rows"`` (one channel, rows no wider than the block) moves whole rows per pass, so a
    thread computes its (row, column) offsets once; ``"flat"`` splits one flat index over the
    threads. Measured on an H200, whole rows per pass lose to one flat index once a tile holds
    several channels (more passes, part-empty), so only single-channel tiles use them.
    """
    per_pass = threads // in_cols
    if tc == 1 and per_pass >= 1:
        return "rows", per_pass, math.ceil(in_rows / per_pass) * _LOAD_PASS_INSTR["rows"]
    cost = _LOAD_PASS_INSTR["flat_channels" if tc > 1 else "flat"]
    return "flat", 0, math.ceil(tc * in_rows * in_cols / threads) * cost


def _evaluate(  # pylint: disable=too-many-arguments,too-many-locals
    problem: DepthwiseProblem,
    limits: GPULimits,
    config: "DepthwiseConv.Config",
    tc: int,
    ty: int,
    vh: int,
    cols: int,
) -> Optional[DepthwiseTile]:
    """Cost one tile, or None when it breaks a limit.

    The kernel is modelled as DRAM traffic and instruction issue that overlap imperfectly:
    ``time = hypot(t_memory, t_issue) / wave efficiency``, and ``score = t_ideal / time`` where
    ``t_ideal`` moves each input and output element once at peak bandwidth. ``t_memory`` counts
    the sectors of each contiguous run (a tile as wide as the plane reads and writes whole rows,
    whole planes even) and the staged halo at the square root of its cost (its second read
    mostly hits L2). ``t_issue`` counts the instructions of every launched warp, idle lanes
    included. Measured on an H200 the model ranks tiles right and is 10-50% optimistic.
    """
    threads = tc * ty * cols
    if threads % limits.warp_size or threads < config.min_threads:
        return None
    regs = _registers(problem, vh)
    rows = ty * vh
    in_rows, in_cols = problem.input_extent(rows, cols)
    smem = tc * in_rows * in_cols * problem.dtype_bytes
    if smem > limits.shared_memory_bytes_per_block:
        return None
    blocks = (
        problem.batch
        * math.ceil(problem.channels / tc)
        * math.ceil(problem.height / rows)
        * math.ceil(problem.width / cols)
    )
    per_sm = min(
        limits.max_threads_per_multiprocessor // threads,
        limits.shared_memory_bytes_per_multiprocessor
        // (smem + limits.shared_memory_reserved_bytes_per_block),
        limits.max_blocks_per_multiprocessor,
        limits.registers_per_multiprocessor // (threads * int(math.ceil(regs / 8.0) * 8)),
    )
    if per_sm < 1:
        return None
    plane_rows, plane_cols = problem.input_extent(problem.height, problem.width)
    needed_in = problem.batch * problem.channels * plane_rows * plane_cols
    read = min(1.0, needed_in / (blocks * tc * in_rows * in_cols))
    waves = blocks / (limits.multiprocessor_count * per_sm)
    wave = waves / math.ceil(waves)

    # Memory: contiguous runs (full-width tiles read and write whole rows, or whole planes).
    full_width = cols >= problem.width
    whole_planes = full_width and rows >= problem.height
    out_run = problem.width * (problem.height * tc if whole_planes else rows) if full_width else cols
    in_run = plane_cols * (plane_rows * tc if whole_planes else in_rows) if full_width else in_cols
    eff_out = _sector_efficiency(out_run * problem.dtype_bytes, config.sector_bytes)
    eff_in = _sector_efficiency(in_run * problem.dtype_bytes, config.sector_bytes)
    bytes_ideal = (needed_in + problem.outputs) * problem.dtype_bytes
    bytes_moved = problem.dtype_bytes * (
        needed_in / (eff_in * math.sqrt(read)) + problem.outputs / eff_out
    )
    # Latency hiding: DRAM bandwidth needs the SM's threads resident (shared memory per block
    # can cap that: measured 13% slower at 7/8 occupancy on an H200).
    occupancy = min(1.0, per_sm * threads / limits.max_threads_per_multiprocessor)
    t_memory = bytes_moved / limits.dram_bytes_per_s / occupancy

    # Issue: the load passes, the window (taps and deduplicated shared loads), the outputs.
    (kh, kw), (sh, _) = problem.kernel, problem.stride
    load_mode, rows_per_pass, load_instr = _load_plan(tc, in_rows, in_cols, threads)
    window = ((vh - 1) * sh + kh) * kw
    thread_instr = _THREAD_INSTR + load_instr + vh * (kh * kw + _OUTPUT_INSTR) + window
    warps = blocks * math.ceil(threads / limits.warp_size)
    t_issue = warps * thread_instr / limits.warp_instructions_per_s
    if problem.height % rows or problem.channels % tc:
        t_issue *= _PARTIAL_TILE_ISSUE_FACTOR

    time = math.hypot(t_memory, t_issue) / wave + _LAUNCH_S
    return DepthwiseTile(
        channels=tc,
        thread_rows=ty,
        rows_per_thread=vh,
        cols=cols,
        threads=threads,
        blocks=blocks,
        shared_bytes=smem,
        registers_estimate=regs,
        load_mode=load_mode,
        load_rows_per_pass=rows_per_pass,
        lane_utilisation=problem.outputs / (blocks * threads * vh),
        read_efficiency=read,
        memory_efficiency=bytes_ideal / bytes_moved,
        wave_efficiency=wave,
        time_s=time,
        score=bytes_ideal / limits.dram_bytes_per_s / time,
    )


def rank_tiles(
    problem: DepthwiseProblem, limits: GPULimits, config: "DepthwiseConv.Config"
) -> List[DepthwiseTile]:
    """The tiles allowed by ``limits`` and ``config``, best first (see :func:`_evaluate`).

    Threads per block are a multiple of the warp and at most ``config.max_threads``; registers
    per thread (estimated) let ``config.min_occupancy`` of an SM's threads stay resident; the
    shared tile fits a block's static shared memory. Ties go to ``VH`` nearest
    ``config.preferred_outputs_per_thread``, then to fewer threads.
    """
    max_threads = min(config.max_threads, limits.max_threads_per_block)
    reg_budget = min(
        limits.max_registers_per_thread,
        limits.registers_per_multiprocessor
        / (limits.max_threads_per_multiprocessor * config.min_occupancy),
    )
    ranked = []
    for cols in _col_candidates(problem.width, config):
        for vh in range(1, min(config.max_outputs_per_thread, problem.height) + 1):
            if _registers(problem, vh) > reg_budget:
                continue
            for ty in range(1, math.ceil(problem.height / vh) + 1):
                if ty * cols > max_threads:
                    break
                tc_max = min(config.max_channels_per_block, problem.channels)
                for tc in range(1, min(tc_max, max_threads // (ty * cols)) + 1):
                    tile = _evaluate(problem, limits, config, tc, ty, vh, cols)
                    if tile is not None:
                        key = (
                            round(tile.score, 2),
                            -abs(vh - config.preferred_outputs_per_thread),
                            -tile.threads,
                        )
                        ranked.append((key, tile))
    ranked.sort(key=lambda item: item[0], reverse=True)
    return [tile for _, tile in ranked]


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
