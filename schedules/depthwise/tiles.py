"""The depthwise-conv tile model: what one block computes and what it costs on the hardware profile.

:func:`rank_tiles` costs every tile ``schedules/depthwise_conv.py`` may use for a matched
convolution (see that module for the schedule and the measurements the model was fitted to).
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits, tile_occupancy
from tvm_fusion_hw.schedules.base.ranking_cache import RememberedRanking


@dataclasses.dataclass
class DepthwiseConfig:  # pylint: disable=too-many-instance-attributes
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
        estimate: bounds registers per thread. A quarter: a 7x7 window's 49 weights need about
        70 registers a thread, over the 64 that half the H200's threads allow, so at one half no
        tile existed and ConvNeXt's depthwise convs fell to dlight (62 of its 73 ms at batch 32).
        The time model already charges the lower residency (memory time / occupancy).
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
    min_occupancy: float = 0.25
    max_kernel: int = 7
    max_stride: int = 2
    sector_bytes: int = 32
    max_attempts: int = 16


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
    blocks_per_multiprocessor: int  # resident, by threads, registers and shared memory
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


# ---- tile choice -----------------------------------------------------------------------------
def _registers(problem: DepthwiseProblem, rows_per_thread: int) -> int:
    """Registers per thread: accumulators, weights, one window row, addressing.

    The compiler walks the input rows of a thread's column window once (loads are deduplicated)
    and keeps only one row live, so the window does not count whole; the constant is calibrated
    on ptxas for sm_90 (26 to 32 registers for VH 1 to 8 with 3x3 windows).
    """
    (kh, kw) = problem.kernel
    return rows_per_thread + kh * kw + kw + 13


def _col_candidates(width: int, config: DepthwiseConfig) -> List[int]:
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
    config: DepthwiseConfig,
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
    if threads % limits.profile.warp_size or threads < config.min_threads:
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
    resident = tile_occupancy(limits, threads, regs, smem)
    per_sm = resident.blocks_per_multiprocessor
    if per_sm < 1:
        return None
    plane_rows, plane_cols = problem.input_extent(problem.height, problem.width)
    needed_in = problem.batch * problem.channels * plane_rows * plane_cols
    read = min(1.0, needed_in / (blocks * tc * in_rows * in_cols))
    waves = blocks / (limits.profile.multiprocessor_count * per_sm)
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
    t_memory = bytes_moved / limits.profile.dram_bytes_per_s / resident.occupancy

    # Issue: the load passes, the window (taps and deduplicated shared loads), the outputs.
    (kh, kw), (sh, _) = problem.kernel, problem.stride
    load_mode, rows_per_pass, load_instr = _load_plan(tc, in_rows, in_cols, threads)
    window = ((vh - 1) * sh + kh) * kw
    thread_instr = _THREAD_INSTR + load_instr + vh * (kh * kw + _OUTPUT_INSTR) + window
    warps = blocks * math.ceil(threads / limits.profile.warp_size)
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
        blocks_per_multiprocessor=per_sm,
        shared_bytes=smem,
        registers_estimate=regs,
        load_mode=load_mode,
        load_rows_per_pass=rows_per_pass,
        lane_utilisation=problem.outputs / (blocks * threads * vh),
        read_efficiency=read,
        memory_efficiency=bytes_ideal / bytes_moved,
        wave_efficiency=wave,
        time_s=time,
        score=bytes_ideal / limits.profile.dram_bytes_per_s / time,
    )


def rank_tiles(
    problem: DepthwiseProblem, limits: GPULimits, config: DepthwiseConfig
) -> List[DepthwiseTile]:
    """The tiles allowed by ``limits`` and ``config``, best first (see :func:`_evaluate`).

    Threads per block are a multiple of the warp and at most ``config.max_threads``; registers
    per thread (estimated) let ``config.min_occupancy`` of an SM's threads stay resident; the
    shared tile fits a block's static shared memory. Ties go to ``VH`` nearest
    ``config.preferred_outputs_per_thread``, then to fewer threads.

    The ranking is remembered for the same problem, limits and config values (the fusion policy
    estimates a depthwise conv with it, then the rule schedules the conv's kernel with it);
    :func:`clear_caches` forgets it.
    """
    return _RANKED(problem, limits, config)


def _rank(problem: DepthwiseProblem, limits: GPULimits, config: DepthwiseConfig) -> List[DepthwiseTile]:
    """:func:`rank_tiles`, computed."""
    max_threads = min(config.max_threads, limits.profile.max_threads_per_block)
    reg_budget = min(
        limits.profile.max_registers_per_thread,
        limits.profile.registers_per_multiprocessor
        / (limits.profile.max_threads_per_multiprocessor * config.min_occupancy),
    )
    warp = limits.profile.warp_size
    ranked = []
    for cols in _col_candidates(problem.width, config):
        for vh in range(1, min(config.max_outputs_per_thread, problem.height) + 1):
            if _registers(problem, vh) > reg_budget:
                continue
            for ty in range(1, math.ceil(problem.height / vh) + 1):
                if ty * cols > max_threads:
                    break
                tc_max = min(config.max_channels_per_block, problem.channels)
                # only channel counts that make the block a whole number of warps (as _evaluate requires)
                tc_step = warp // math.gcd(warp, ty * cols)
                for tc in range(tc_step, min(tc_max, max_threads // (ty * cols)) + 1, tc_step):
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


_RANKED = RememberedRanking(_rank, maxsize=64)


def clear_caches() -> None:
    """Forget the remembered rankings, so that the next one pays its whole cost
    (``bench/compile_times.py`` times cold compiles)."""
    _RANKED.cache_clear()
