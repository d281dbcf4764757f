"""The tile model of the depthwise + pointwise rule (:mod:`.dw_pw`): what a tile costs on a GPU.

A block computes the pointwise outputs of ``TH x TW`` pixels of one image for ``FT`` output
channels. Per pass over ``KC`` input channels it stages the input rows with their halo, the
depthwise and the pointwise weights in shared memory, computes the ``KC x TH*TW`` depthwise
outputs (epilogue applied) into a shared tile, and runs the pointwise GEMM over that tile with
``MP x MF`` accumulators a thread. The model counts issue slots per pass (staging, the depthwise
taps, the GEMM's FMAs and shared loads), the staging latency that other resident blocks hide,
waves of blocks over the multiprocessors, and DRAM traffic as a floor, all from the target's
hardware profile. The constants are estimates (some borrowed from :mod:`.conv_pool_tiles`, whose
kernels have the same staging passes); see :func:`evaluate_tile`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import List, Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits, tile_occupancy


@dataclasses.dataclass
class DwPwConfig:  # pylint: disable=too-many-instance-attributes
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


@dataclasses.dataclass(frozen=True)
class DwPwProblem:  # pylint: disable=too-many-instance-attributes
    """A matched depthwise conv (+ epilogue) feeding a pointwise (1x1) conv (+ epilogue)."""

    batch: int
    channels: int  # C: depthwise channels = the pointwise conv's K
    out_channels: int  # F
    height: int  # output rows (the depthwise output plane = the pointwise plane)
    width: int
    kernel: Tuple[int, int]  # depthwise KH, KW
    stride: Tuple[int, int]
    dilation: Tuple[int, int]
    dtype_bytes: int
    dw_data_read_index: int  # operand positions in the depthwise and pointwise blocks' reads
    dw_weight_read_index: int
    pw_data_read_index: int
    pw_weight_read_index: int
    tail_tensors: int = 0  # full-size tensors the pointwise epilogue reads (a residual)

    @property
    def pixels(self) -> int:
        """Output pixels of all images."""
        return self.batch * self.height * self.width

    @property
    def flops(self) -> float:
        """FLOPs of both convolutions (2 per MAC)."""
        taps = self.kernel[0] * self.kernel[1]
        return 2.0 * self.pixels * self.channels * (taps + self.out_channels)

    def input_extent(self, rows: int, cols: int) -> Tuple[int, int]:
        """Input rows and columns (halo included) that ``rows x cols`` outputs read."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        return (rows - 1) * sh + (kh - 1) * dh + 1, (cols - 1) * sw + (kw - 1) * dw + 1

    def dram_bytes(self) -> int:
        """Bytes the fused kernel must move at least: input, weights, output, residual."""
        in_rows, in_cols = self.input_extent(self.height, self.width)
        taps = self.kernel[0] * self.kernel[1]
        return self.dtype_bytes * (
            self.batch * self.channels * in_rows * in_cols
            + self.channels * (taps + self.out_channels)
            + (1 + self.tail_tensors) * self.batch * self.out_channels * self.height * self.width
        )


@dataclasses.dataclass(frozen=True)
class DwPwTile:  # pylint: disable=too-many-instance-attributes
    """The tile one block computes, and what the cost model thought of it."""

    rows: int  # TH: output rows per block
    cols: int  # TW: output columns per block
    chunk: int  # KC: depthwise channels per pass (the shared tile's depth)
    pixel_threads: int  # TP: threads along pixels (fastest)
    pixels_per_thread: int  # MP: a thread's pixels, TP apart
    channel_threads: int  # TF: threads along output channels
    channels_per_thread: int  # MF: a thread's adjacent output channels
    unroll: int  # K steps per unrolled step of the GEMM loop
    stage_unroll: int  # staging-loop iterations unrolled (global loads in flight a thread)
    threads: int
    blocks: int
    blocks_per_multiprocessor: int  # resident, by threads, registers and shared memory
    shared_bytes: int
    registers_estimate: int
    input_load: Tuple[str, int]  # ("rows", lines per pass) or ("flat", 0)
    issue_per_pass: float  # warp instructions of one block's pass, per warp
    time_s: float  # modelled kernel time
    score: float  # modelled fraction of the time the DRAM traffic alone takes
    #: the modelled time without its DRAM floor (issue, staging latency, waves; launch included)
    #: and the floor itself: a fusion policy weighs the two against the unfused kernels'
    compute_s: float = 0.0
    dram_s: float = 0.0
    #: times each depthwise output is computed: once per block of ``FT`` output channels
    recompute: int = 1

    @property
    def pixels(self) -> int:
        """TH x TW: pixels per block (the GEMM's M)."""
        return self.rows * self.cols

    @property
    def out_channels(self) -> int:
        """FT: output channels per block (the GEMM's N)."""
        return self.channel_threads * self.channels_per_thread

    @property
    def accumulators(self) -> int:
        """Pointwise outputs a thread keeps in registers."""
        return self.pixels_per_thread * self.channels_per_thread

    def summary(self) -> str:
        """The tile in words, for reports."""
        return (f"{self.rows}x{self.cols} pixels x {self.out_channels} output channels a block, "
                f"{self.threads} threads x {self.pixels_per_thread}x{self.channels_per_thread} "
                f"accumulators, depthwise tile of {self.chunk} channels a pass in shared memory "
                f"({self.shared_bytes} B shared), {self.blocks} blocks, model {self.time_s * 1e6:.1f} us")



# ---- tile choice -----------------------------------------------------------------------------
#: Issue slots per element of a staging pass: whole rows per pass (offsets computed once per
#: thread) or one flat index (a div/mod per element); padding predicate, load and store included
#: (as :mod:`.conv_pool_tiles`).
_LOAD_INSTR = {"rows": 8, "flat": 20}
#: The depthwise phase, from the PTX of the MobileNetV2 pairs (sm_90, nvcc 13): per output two
#: instructions a tap (the input's shared load, the FMA) and the epilogue, its shared store, the
#: addresses and the loop; per channel of a thread its taps' weights (shared loads) and the
#: epilogue's parameters (BatchNorm's four and the bias from global memory, its square root),
#: hoisted out of the loop over the thread's pixels.
_DW_OUTPUT_INSTR = 15
_DW_CHANNEL_INSTR = 25
#: Per pass: three barriers and the loop; and the latency of a round of its global loads (a
#: staging loop issues ``config.stage_unroll`` loads a thread before it waits), which only the
#: other resident blocks' compute hides (as :mod:`.conv_pool_tiles`).
_PASS_INSTR = 48
_PASS_LATENCY_S = 0.6e-6
#: Per pointwise output at the end: the epilogue's loads and math, the store, the guard.
_OUTPUT_INSTR = 8
_LAUNCH_S = 3e-6
#: A tile that does not divide the plane guards its loads and stores (as the depthwise rule).
_PARTIAL_TILE_ISSUE_FACTOR = 1.3
#: Issue efficiency against resident warps per scheduler: ``min(1, base + per_warp * warps)``.
_ISSUE_EFFICIENCY = (0.75, 0.0625)
_SCHEDULERS_PER_MULTIPROCESSOR = 4
#: Registers besides the accumulators and a K step's operands: addresses, loop counters, the
#: staging loop's offsets (fitted to ptxas, see :func:`tile_registers`).
_REGISTER_BASE = 38
#: TVM's CUDA codegen aligns every shared array to 64 bytes.
_SHARED_ALIGN = 64


def tile_registers(mp: int, mf: int, vector: int) -> int:
    """Registers per thread: the ``mp x mf`` accumulators, one K step's ``mp`` pixels and ``mf``
    weights (loaded ahead by a vector where aligned), and the fixed part (addresses, counters, a
    staging round's loads, the depthwise phase's weights and epilogue parameters).

    The kernel's launch bounds name the residency this estimate gives (see
    ``common.with_min_blocks_per_multiprocessor``), so ptxas may use ``registers per SM / (residency x threads)``,
    at least this. Measured (nvcc 13, sm_90, 66 tiles of the MobileNetV2 pairs at batch 32): ptxas
    used 17 fewer to 23 more registers than estimated, and spilled none."""
    return mp * mf + mp + mf + (vector - 1) + _REGISTER_BASE


@functools.lru_cache(maxsize=4096)
def _divisors(value: int, limit: int) -> Tuple[int, ...]:
    return tuple(d for d in range(1, min(value, limit) + 1) if value % d == 0)


def _col_candidates(width: int, limit: int) -> List[int]:
    """TW: the full width, even fractions of it, and powers of two below it."""
    cands = {width} if width <= limit else set()
    cands.update(width // k for k in (2, 3, 4, 7, 8) if width % k == 0 and 4 <= width // k <= limit)
    cands.update(1 << i for i in range(2, 8) if (1 << i) < width and (1 << i) <= limit)
    return sorted(cands)


def _row_candidates(height: int, limit: int) -> List[int]:
    """TH: divisors of the height and ceil(height / k), up to ``limit`` rows."""
    cands = set(_divisors(height, limit))
    cands.update(math.ceil(height / k) for k in range(1, 9) if math.ceil(height / k) <= limit)
    return sorted(cands)


def _load_plan(lines: int, line: int, threads: int) -> Tuple[Tuple[str, int], int]:
    """How a block stages ``lines`` contiguous runs of ``line`` elements with ``threads`` threads:
    ``((mode, lines per pass), issue slots per thread)``."""
    per_pass = threads // line
    if per_pass >= 1:
        return ("rows", per_pass), math.ceil(lines / per_pass) * _LOAD_INSTR["rows"]
    return ("flat", 0), math.ceil(lines * line / threads) * _LOAD_INSTR["flat"]


def _aligned(words: int) -> int:
    return _SHARED_ALIGN // 4 * math.ceil(words * 4 / _SHARED_ALIGN)


def shared_bytes(problem: DwPwProblem, rows: int, cols: int, chunk: int, out_channels: int) -> int:
    """Shared memory of a tile: the input with its halo, the depthwise weights, the depthwise
    outputs and the pointwise weights of one chunk (each array aligned as TVM declares it)."""
    in_rows, in_cols = problem.input_extent(rows, cols)
    taps = problem.kernel[0] * problem.kernel[1]
    words = (_aligned(chunk * in_rows * in_cols) + _aligned(chunk * taps)
             + _aligned(chunk * rows * cols) + _aligned(chunk * out_channels))
    return problem.dtype_bytes * words


def evaluate_tile(  # pylint: disable=too-many-arguments,too-many-locals
    problem: DwPwProblem,
    limits: GPULimits,
    config: DwPwConfig,
    shape: Tuple[int, int, int, int, int, int],
    chunk: int,
) -> Optional[DwPwTile]:
    """Cost one tile, or None when it breaks a limit.

    ``shape`` is ``(TH, TW, MP, TP, MF, TF)`` with ``MP x TP = TH x TW``, and ``chunk`` the
    channels per pass. Per pass a block's warps issue the staging (input rows with halo, both
    weights), the depthwise outputs (three instructions a tap and the epilogue) and the GEMM
    (FMAs, a shared load a pixel and a vector a weight group), at an efficiency that grows with
    the resident warps. A pass also waits for its staging latency, which the other resident
    blocks' compute hides. Blocks go to the multiprocessors in waves; the busiest one sets the
    time, which DRAM traffic bounds from below; ``score`` is the DRAM-bound time over the time.
    """
    rows, cols, mp, tp, mf, tf = shape
    threads = tp * tf
    if threads % limits.profile.warp_size or not config.min_threads <= threads <= config.max_threads:
        return None
    if threads > limits.profile.max_threads_per_block or mp * tp != rows * cols or chunk % tf:
        return None
    ft = mf * tf
    vector = next(w for w in (4, 2, 1) if mf % w == 0 and ft % w == 0)
    regs = tile_registers(mp, mf, vector)
    unrolls = [u for u in _divisors(chunk, config.max_unroll) if u * mp * mf <= config.max_unrolled_fma]
    budget = min(config.max_registers, limits.profile.max_registers_per_thread,
                 limits.profile.registers_per_multiprocessor // threads)
    if mp * mf > config.max_accumulators or regs > budget or not unrolls:
        return None
    smem = shared_bytes(problem, rows, cols, chunk, ft)
    if smem > limits.shared_memory_bytes_per_block:
        return None
    blocks = (problem.batch * math.ceil(problem.out_channels / ft)
              * math.ceil(problem.height / rows) * math.ceil(problem.width / cols))
    resident = tile_occupancy(limits, threads, regs, smem).blocks_per_multiprocessor
    if resident < 1:
        return None

    # One pass of one block, in issue slots per warp (= instructions per thread).
    taps = problem.kernel[0] * problem.kernel[1]
    in_rows, in_cols = problem.input_extent(rows, cols)
    input_load, input_instr = _load_plan(chunk * in_rows, in_cols, threads)
    weights_instr = _LOAD_INSTR["flat"] * (math.ceil(chunk * taps / threads)
                                         + math.ceil(chunk * ft / threads))
    dw_instr = chunk // tf * (taps + _DW_CHANNEL_INSTR + mp * (2 * taps + _DW_OUTPUT_INSTR))
    gemm_instr = chunk * (mp * mf + mp + mf // vector)
    issue = input_instr + weights_instr + dw_instr + gemm_instr + _PASS_INSTR
    if problem.height % rows or problem.width % cols or problem.out_channels % ft:
        issue *= _PARTIAL_TILE_ISSUE_FACTOR
    warps = threads // limits.profile.warp_size
    slots_per_s = limits.warp_instructions_per_s / limits.profile.multiprocessor_count
    per_sm = math.ceil(blocks / limits.profile.multiprocessor_count)  # the busiest multiprocessor
    resident_warps = min(resident, per_sm) * warps
    efficiency = min(1.0, _ISSUE_EFFICIENCY[0] + _ISSUE_EFFICIENCY[1] * resident_warps
                     / _SCHEDULERS_PER_MULTIPROCESSOR)
    compute_s = warps * issue / efficiency / slots_per_s
    passes = math.ceil(problem.channels / chunk)
    tail_s = warps * mp * mf * (_OUTPUT_INSTR + 2 * problem.tail_tensors) / slots_per_s

    staged = max(math.ceil(chunk * in_rows * in_cols / threads), math.ceil(chunk * ft / threads))
    rounds = math.ceil(staged / config.stage_unroll) if config.stage_unroll else 1
    latency_s = _PASS_LATENCY_S * rounds

    def round_time(active: int) -> float:
        return passes * max(active * compute_s, compute_s + latency_s) + active * tail_s

    time = (per_sm // resident) * round_time(resident)
    if per_sm % resident:
        time += round_time(per_sm % resident)
    dram_s = problem.dram_bytes() / limits.profile.dram_bytes_per_s
    without_floor_s = time + _LAUNCH_S
    time = max(time, dram_s) + _LAUNCH_S
    return DwPwTile(
        rows=rows,
        cols=cols,
        chunk=chunk,
        pixel_threads=tp,
        pixels_per_thread=mp,
        channel_threads=tf,
        channels_per_thread=mf,
        unroll=unrolls[-1],
        stage_unroll=config.stage_unroll,
        threads=threads,
        blocks=blocks,
        blocks_per_multiprocessor=resident,
        shared_bytes=smem,
        registers_estimate=regs,
        input_load=input_load,
        issue_per_pass=issue,
        time_s=time,
        score=(dram_s + _LAUNCH_S) / time,
        compute_s=without_floor_s,
        dram_s=dram_s,
        recompute=math.ceil(problem.out_channels / ft),
    )


def _shapes(problem: DwPwProblem, limits: GPULimits, config: DwPwConfig):
    """Every ``(TH, TW, MP, TP, MF, TF)`` within the config's bounds and the warp multiple."""
    max_threads = min(config.max_threads, limits.profile.max_threads_per_block)
    out_tiles = [ft for ft in _divisors(problem.out_channels, config.max_out_channels)]
    for cols in _col_candidates(problem.width, config.max_pixels):
        for rows in _row_candidates(problem.height, config.max_pixels // cols):
            pixels = rows * cols
            for mp, ft in itertools.product(_divisors(pixels, config.max_pixels_per_thread), out_tiles):
                tp = pixels // mp
                for mf in _divisors(ft, config.max_channels_per_thread):
                    threads = tp * (ft // mf)
                    if (threads % limits.profile.warp_size or not config.min_threads <= threads <= max_threads
                            or mp * mf > config.max_accumulators):
                        continue
                    yield rows, cols, mp, tp, mf, ft // mf


def rank_tiles(problem: DwPwProblem, limits: GPULimits, config: DwPwConfig) -> List[DwPwTile]:
    """The tiles allowed by ``limits`` and ``config``, best first (see :func:`evaluate_tile`).

    Two passes keep compile time low: every shape at its largest chunk that fits, then every
    chunk for the best ``config.shortlist`` shapes. Times within 1% tie; ties go to fewer
    registers, then to fewer threads (more blocks resident).
    """
    chunks = _divisors(problem.channels, config.max_chunk)

    def key(tile: DwPwTile):
        return (round(tile.time_s * 1e8), tile.registers_estimate, tile.threads, -tile.chunk)

    first = []
    for shape in _shapes(problem, limits, config):
        # the chunks evaluate_tile would refuse at once (its channel split or shared memory), skipped
        rows, cols, _, _, mf, tf = shape
        fitting = (c for c in reversed(chunks) if c % tf == 0 and shared_bytes(problem, rows, cols, c, mf * tf)
                   <= limits.shared_memory_bytes_per_block)
        tile = next((t for t in (evaluate_tile(problem, limits, config, shape, c) for c in fitting)
                     if t is not None), None)
        if tile is not None:
            first.append((key(tile), shape))
    first.sort()
    ranked = []
    for _, shape in first[: config.shortlist]:
        for chunk in chunks:
            tile = evaluate_tile(problem, limits, config, shape, chunk)
            if tile is not None:
                ranked.append((key(tile), tile))
    ranked.sort(key=lambda item: item[0])
    return [tile for _, tile in ranked]


def clear_caches() -> None:
    """Forget the remembered divisors (``bench/compile_times.py`` times cold compiles)."""
    _divisors.cache_clear()
