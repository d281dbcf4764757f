"""The tile model of the conv + pool rule (:mod:`.conv_pool`): what a tile costs on a GPU.

A tile is scored by issue slots (FMAs, shared loads, staging) against shared-memory wavefronts of
the actual lane addresses (bank conflicts simulated, :mod:`.shared_banks`), staging latency hidden
by other resident blocks, and waves of blocks over the multiprocessors, all from the target's
hardware profile. Registers follow a fit to ptxas (sm_90). The constants are estimates; see
``rank_tiles``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import List, NamedTuple, Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits, tile_occupancy
from tvm_fusion_hw.schedules.base.ranking_cache import RememberedRanking

from . import shared_banks
from .config import ConvPoolConfig
from .shared_banks import input_reads, vector_alignment, weight_reads


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
    window: Tuple[int, int]  # pool window
    pool: str  # "max" or "sum" (an average divides in the tail)
    dtype_bytes: int
    data_read_index: int  # operand position of the data in the conv block's reads
    weight_read_index: int
    #: the pool's stride (None: the window, windows that do not overlap)
    pool_stride: Optional[Tuple[int, int]] = None

    @property
    def pool_strides(self) -> Tuple[int, int]:
        """The pool's stride along rows and columns."""
        return self.pool_stride or self.window

    def conv_extent(self, windows_rows: int, windows_cols: int) -> Tuple[int, int]:
        """Conv rows and columns that ``windows_rows x windows_cols`` adjacent pool windows read
        (overlapping windows share theirs)."""
        (wh, ww), (sh, sw) = self.window, self.pool_strides
        return (windows_rows - 1) * sh + wh, (windows_cols - 1) * sw + ww

    @property
    def flops(self) -> float:
        """FLOPs of the conv outputs the pool reads, each counted once (2 per MAC)."""
        (kh, kw), (rows, cols) = self.kernel, self.conv_extent(*self.pooled)
        return 2.0 * self.batch * self.out_channels * rows * cols * self.in_channels * kh * kw

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
    #: the modelled time without its DRAM floor, and the floor (compulsory bytes / bandwidth): a
    #: fusion policy weighs the two on another profile's roofline (fusion/pair_cost.py)
    compute_s: float = 0.0
    dram_s: float = 0.0

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

    def summary(self) -> str:
        """The tile in words, for reports."""
        return (f"{self.channels} channels x {self.pooled_rows}x{self.pooled_cols} pooled outputs a block, "
                f"{self.threads} threads, {self.accumulators} conv outputs a thread in registers, "
                f"{self.chunk} input channels staged a pass ({self.shared_bytes} B shared), "
                f"{self.blocks} blocks, model {self.time_s * 1e6:.1f} us")


# ---- tile choice -----------------------------------------------------------------------------
#: Shared memory serves one 128-byte wavefront per clock while the multiprocessor issues 4 warp
#: instructions (NVIDIA sm_80/sm_90: 4 schedulers; AMD CDNA: 128 B/clk against 128 FP32 lanes).
_SLOTS_PER_WAVEFRONT = 4
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


def tile_registers(problem: ConvPoolProblem, cv: int, rows: int, cols: int, unroll: int) -> int:
    """Registers per thread: the ``cv x rows x cols`` accumulators, the input window of one
    channel, the ``cv`` weights of a tap and addressing; unrolling the channel loop adds none.
    Fitted to ptxas (nvcc 13, sm_90, 3x3 conv, 2x2 pool): 37 tiles of 4 to 128 accumulators at
    one channel per step within 2 for 64 accumulators; 48 of conv_relu_pool's best-ranked tiles
    on three profiles (H200, RTX 4090, RTX 3060, batch 1 and 32), most unrolled by 4: median
    error 1, 43 of 48 within 16, the worst 37 under (a 4x2-output tile, 121 against 84). A
    loaded-ahead window per unrolled step, as the model first assumed, overestimated the
    unrolled tiles by 20-57 (98 against 56-79 for 16 accumulators), which made the policy stage
    conv + pool at batch 1 for an occupancy drop that ptxas does not show."""
    del unroll  # ptxas reuses the window's registers across unrolled channels
    win_rows, win_cols = problem.input_extent(rows, cols)
    if max(problem.stride) > 1:
        # A strided conv's output rows share few input rows: ptxas keeps about a kernel's height
        # of input rows live, not the window. Fitted to ptxas (nvcc 13, sm_90) on 7x7/2 convs with
        # 3x3/2 pools: 25 accumulators took 142 registers (estimate 141), 15 took 127 (117), 45
        # took 234 (217), 27 took 128 (199: high).
        win_rows = min(win_rows, problem.kernel[0])
    return cv * rows * cols + win_rows * win_cols + cv + _REGISTER_BASE


@functools.lru_cache(maxsize=1024)
def _divisors(value: int, limit: int) -> Tuple[int, ...]:
    return tuple(d for d in range(1, min(value, limit) + 1) if value % d == 0)


@functools.lru_cache(maxsize=1024)
def _splits(value: int, limit: int) -> Tuple[int, ...]:
    """Threads along an axis of ``value`` items: its divisors, then ceil(value / k) and powers
    of two, which leave a partial edge tile (guarded)."""
    cands = set(_divisors(value, limit))
    cands.update(math.ceil(value / k) for k in range(1, 9))
    cands.update(1 << i for i in range(0, 11) if (1 << i) < value)
    return tuple(sorted(c for c in cands if 1 <= c <= min(value, limit)))


def _load_plan(lines: int, line: int, threads: int) -> Tuple[Tuple[str, int], int]:
    """How a block stages ``lines`` contiguous runs of ``line`` elements with ``threads`` threads:
    ``((mode, lines per pass), issue slots per thread)``."""
    per_pass = threads // line
    if per_pass >= 1:
        return ("rows", per_pass), math.ceil(lines / per_pass) * _LOAD_INSTR["rows"]
    return ("flat", 0), math.ceil(lines * line / threads) * _LOAD_INSTR["flat"]


class _ShapeCosts(NamedTuple):
    """What a tile shape ``(CV, CT, PHV, PHT, PWV, PWT)`` costs whatever its chunk: worked out
    once per shape, then priced at each chunk (see :func:`evaluate_tile`)."""

    shape: Tuple[int, int, int, int, int, int]
    threads: int
    rows: int  # conv outputs per thread along H
    cols: int  # and along W
    register_budget: int
    in_rows: int  # staged input rows and columns of the block, halo included
    in_cols: int
    win_rows: int  # input rows and columns of one thread's window
    win_cols: int
    pitch: int  # words between staged rows
    in_instr: int  # LDS instructions and wavefronts of a warp reading one row of its windows
    in_wavefronts: int
    channel_words: int  # shared words per staged input channel (input rows and weights)


def _shape_costs(  # pylint: disable=too-many-locals
    problem: ConvPoolProblem, limits: GPULimits, config: ConvPoolConfig,
    shape: Tuple[int, int, int, int, int, int],
) -> Optional[_ShapeCosts]:
    """The chunk-independent part of :func:`evaluate_tile`, or None when the shape breaks a limit
    at every chunk."""
    cv, ct, phv, pht, pwv, pwt = shape
    kh, kw = problem.kernel
    threads = ct * pht * pwt
    if threads % limits.profile.warp_size or not config.min_threads <= threads <= config.max_threads:
        return None
    if threads > limits.profile.max_threads_per_block:
        return None
    rows, cols = problem.conv_extent(phv, pwv)  # conv outputs per thread
    budget = min(config.max_registers, limits.profile.max_registers_per_thread,
                 limits.profile.registers_per_multiprocessor // threads)
    # Every chunk may step one channel at a time, and unrolling only adds registers: a shape over
    # the budget at unroll 1 fits no chunk.
    if (cv * rows * cols > config.max_accumulators or config.max_unroll < 1
            or tile_registers(problem, cv, rows, cols, 1) > budget):
        return None
    in_rows, in_cols = problem.input_extent(*problem.conv_extent(phv * pht, pwv * pwt))
    weight_words = ct * cv * kh * kw
    # The rows' pitch is at least in_cols: a shape whose one staged channel does not fit the block's
    # shared memory then fits no chunk, and needs no bank simulation.
    if problem.dtype_bytes * (in_rows * in_cols + weight_words) > limits.shared_memory_bytes_per_block:
        return None
    win_rows, win_cols = problem.input_extent(rows, cols)
    (sh, sw), (psh, psw) = problem.stride, problem.pool_strides
    pitch, in_instr, in_wavefronts = input_reads(  # threads step phv (pwv) pool strides apart
        limits.profile.warp_size, pht, pwt, (phv * psh * sh, pwv * psw * sw), win_cols, in_cols)
    return _ShapeCosts(shape, threads, rows, cols, budget, in_rows, in_cols, win_rows, win_cols,
                       pitch, in_instr, in_wavefronts, in_rows * pitch + weight_words)


def evaluate_tile(
    problem: ConvPoolProblem,
    limits: GPULimits,
    config: ConvPoolConfig,
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
    costs = _shape_costs(problem, limits, config, shape)
    return None if costs is None else _tile_at(problem, limits, config, costs, chunk)


def _tile_at(  # pylint: disable=too-many-locals
    problem: ConvPoolProblem, limits: GPULimits, config: ConvPoolConfig, costs: _ShapeCosts,
    chunk: int,
) -> Optional[ConvPoolTile]:
    """:func:`evaluate_tile` of a shape whose chunk-independent costs are ``costs``."""
    cv, ct, phv, pht, pwv, pwt = costs.shape
    kh, kw = problem.kernel
    threads, rows, cols, taps = costs.threads, costs.rows, costs.cols, kh * kw
    acc = cv * rows * cols
    unrolls = [  # never empty: _shape_costs checked unroll 1
        u for u in _divisors(chunk, config.max_unroll)
        if (u == 1 or u * taps * acc <= config.max_unrolled_fma)
        and tile_registers(problem, cv, rows, cols, u) <= costs.register_budget
    ]
    unroll = unrolls[-1]
    regs = tile_registers(problem, cv, rows, cols, unroll)
    smem = problem.dtype_bytes * chunk * costs.channel_words
    if smem > limits.shared_memory_bytes_per_block:
        return None

    blocks = (
        problem.batch
        * math.ceil(problem.out_channels / (ct * cv))
        * math.ceil(problem.pooled[0] / (pht * phv))
        * math.ceil(problem.pooled[1] / (pwt * pwv))
    )
    resident = tile_occupancy(limits, threads, regs, smem).blocks_per_multiprocessor
    if resident < 1:
        return None

    # One staging pass of one block: issue and shared-memory slots of its multiprocessor.
    warps = threads // limits.profile.warp_size
    input_load, input_instr = _load_plan(chunk * costs.in_rows, costs.in_cols, threads)
    weight_load, weight_instr = _load_plan(ct * cv, chunk * taps, threads)
    fma = chunk * taps * acc
    # Per input channel: the window's rows, and each of the thread's channels' taps (vectorised
    # over the unrolled channels' taps, as far as alignment allows).
    w_instr, w_wavefronts = weight_reads(
        limits.profile.warp_size, pht * pwt, cv * chunk * taps, unroll * taps,
        vector_alignment(chunk * taps, unroll * taps))
    lds_instr = chunk * (costs.win_rows * costs.in_instr + cv * w_instr / unroll)
    issue = fma + lds_instr + input_instr + weight_instr + _PASS_INSTR
    if (
        problem.out_channels % (ct * cv)
        or problem.pooled[0] % (pht * phv)
        or problem.pooled[1] % (pwt * pwv)
    ):
        issue *= _PARTIAL_TILE_ISSUE_FACTOR
    shared = _SLOTS_PER_WAVEFRONT * chunk * (costs.win_rows * costs.in_wavefronts
                                             + cv * w_wavefronts / unroll)
    slots_per_s = limits.warp_instructions_per_s / limits.profile.multiprocessor_count
    per_sm = math.ceil(blocks / limits.profile.multiprocessor_count)  # the busiest multiprocessor
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
    (sh, sw), (psh, psw) = problem.stride, problem.pool_strides
    dram_bytes = problem.dtype_bytes * problem.batch * (
        problem.in_channels * (ph * psh * sh) * (pw * psw * sw) + problem.out_channels * ph * pw
    )
    dram_s = dram_bytes / limits.profile.dram_bytes_per_s
    without_floor_s = time + _LAUNCH_S
    time = max(time, dram_s) + _LAUNCH_S
    peak = limits.warp_instructions_per_s * 2 * limits.profile.warp_size
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
        row_pitch=costs.pitch,
        lds_per_fma=lds_instr / fma,
        wavefronts_per_fma=shared / _SLOTS_PER_WAVEFRONT / fma,
        time_s=time,
        score=problem.flops / peak / time,
        compute_s=without_floor_s,
        dram_s=dram_s,
    )


def rank_tiles(
    problem: ConvPoolProblem, limits: GPULimits, config: ConvPoolConfig
) -> List[ConvPoolTile]:
    """The tiles allowed by ``limits`` and ``config``, best first (see :func:`evaluate_tile`).

    Channels per thread and chunks divide the channel counts; threads per pooled axis are its
    divisors or leave a guarded edge tile (costed). Scores within 0.005 tie (the model is not
    finer than that); ties go to fewer shared loads, then wavefronts, per FMA, then to fewer
    passes (larger chunks), fewer registers and fewer threads.

    The ranking is remembered for the same problem, limits and config values (the fusion policy
    plans a pair with it, then the rule schedules the fused kernel with it, in one compile);
    :func:`clear_caches` forgets it.
    """
    return _RANKED(problem, limits, config)


def _rank(  # pylint: disable=too-many-locals
    problem: ConvPoolProblem, limits: GPULimits, config: ConvPoolConfig
) -> List[ConvPoolTile]:
    """:func:`rank_tiles`, computed."""
    (ph, pw), c_out = problem.pooled, problem.out_channels
    warp = limits.profile.warp_size
    max_threads = min(config.max_threads, limits.profile.max_threads_per_block)
    chunks = _divisors(problem.in_channels, config.max_chunk)

    def key(tile):
        return (round(tile.score, 2), -tile.lds_per_fma, -tile.wavefronts_per_fma, tile.chunk,
                -tile.registers_estimate, -tile.threads)

    # Two passes keep compile time low (every shape at every chunk is ~30k evaluations): each shape
    # at its largest admissible chunk, then every chunk for the best shapes only. A shape's
    # chunk-independent costs are worked out once; shared memory grows with the chunk, so chunks
    # above the largest that fits are not tried.
    first, shape_costs = [], {}
    for cv, phv, pwv in itertools.product(
        _divisors(c_out, config.max_channels_per_thread),
        range(1, min(ph, 4) + 1),
        range(1, min(pw, 4) + 1),
    ):
        if cv * math.prod(problem.conv_extent(phv, pwv)) > config.max_accumulators:
            continue
        for ct in _divisors(c_out // cv, max_threads):
            for pht in _splits(math.ceil(ph / phv), max_threads // ct):
                for pwt in _splits(math.ceil(pw / pwv), max_threads // (ct * pht)):
                    threads = ct * pht * pwt
                    if threads % warp or threads < config.min_threads:
                        continue
                    shape = (cv, ct, phv, pht, pwv, pwt)
                    costs = _shape_costs(problem, limits, config, shape)
                    if costs is None:
                        continue
                    widest = limits.shared_memory_bytes_per_block // (
                        problem.dtype_bytes * costs.channel_words)
                    tile = next((t for t in (_tile_at(problem, limits, config, costs, c)
                                             for c in reversed(chunks) if c <= widest)
                                 if t is not None), None)
                    if tile is not None:
                        shape_costs[shape] = costs
                        first.append((key(tile), shape))
    first.sort(reverse=True)
    ranked = []
    for _, shape in first[: config.shortlist]:
        for chunk in chunks:
            tile = _tile_at(problem, limits, config, shape_costs[shape], chunk)
            if tile is not None:
                ranked.append((key(tile), tile))
    ranked.sort(key=lambda item: item[0], reverse=True)
    return [tile for _, tile in ranked]


_RANKED = RememberedRanking(_rank, maxsize=16)


def clear_caches() -> None:
    """Forget the remembered rankings and the helpers' results (divisors, occupancies, and the bank
    simulations of :mod:`.shared_banks`), so that the next ranking pays its whole cost:
    ``bench/compile_times.py`` times cold compiles."""
    for cached in (_RANKED, _divisors, _splits, tile_occupancy):
        cached.cache_clear()
    shared_banks.clear_caches()
