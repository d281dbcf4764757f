"""The tile model of the implicit-GEMM rule (:mod:`.gemm`): what a tile costs on a GPU.

:func:`rank_tiles` costs every tile the rule may use for a GEMM (block tile ``BM x BN``, thread
tile ``TM x TN``, K step ``BK``, split K, prefetch, shared-read width) by a model that counts waves
of blocks over the SMs (register and shared-memory limits give the blocks per SM), the issue cost
of a thread tile (FMAs plus the shared loads that feed them), a K step's load latency that other
resident blocks (or prefetch) hide, and the partial sums' round trip through memory. Its constants
(:class:`.config.GemmConfig`, the rule's ``ImplicitGemm.Config``) are fitted to ``bench/tile_sweep.py`` on an H200; see :mod:`.gemm` for
the schedule and the measurements.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import List, Optional, Tuple

from tvm_fusion_hw.schedules.base.limits import GPULimits, tile_occupancy
from tvm_fusion_hw.schedules.base.ranking_cache import RememberedRanking

#: ptxas (CUDA 13, sm_90) caps 256-thread blocks that prefetch K-major tiles at 64 registers and
#: spills 4-16 bytes (ResNet-50's split-K 3x3 convs at batch 1); 128-thread ones do not spill.
#: ``common.with_min_blocks_per_multiprocessor`` at the modelled residency also avoids it (80
#: registers, no spill) but sets launch bounds on every GEMM kernel: not adopted until timed.
_MAX_PREFETCH_VECTOR_THREADS = 128

#: Vector tiles only where the K loop dominates the kernel: a thread's outputs then sit in runs of
#: 4 and its epilogue loads and stores are strided. On the H200 they won at 48-288 K steps a
#: block (BERT b32, ResNet-50 b32 3x3, tile sweep 3) and lost at 2 (ResNet-50 b32's 1x1 conv with
#: K 64: 149 against 126 us), and whole MobileNetV2 and SqueezeNet at batch 32 ran 21% and 12%
#: slower with vector tiles on every 1x1 conv (bench/results/2026-11-30-h200-vector-loads).
_MIN_VECTOR_STEPS = 16

#: cp.async prefetch only where a block's K loop is this long: its pipeline's fill and drain (and
#: the doubled shared tiles) cost more than it hides on short loops. On the H200
#: (bench/results/2026-11-30-h200-stop10, against stop 9's register prefetch) the kernels with K
#: under 256 (1-6 steps) ran up to 17% slower with it, most with K of 256 or more 5-18% faster
#: (ResNet-50's 3x3 convs, BERT's GEMMs); MobileNetV2's 1x1 convs with K 320-960 at batch 32
#: stayed 4-23% slower. A count of steps would let a smaller BK pass it.
_MIN_ASYNC_DEPTH = 256

#: Buffers of each shared tile when prefetching with ``cp.async`` where the caller names none:
#: step k+1 lands in one while step k is read from the other (three stages, within the static
#: 48 KiB and with the K loop rolled, measured no faster on the H200, tile sweep 4; the ranking
#: tries ``GemmConfig.async_stages``).
_ASYNC_STAGES = 2

#: Computed elements (a GEMM prologue's) a thread copies per K step whose loads ptxas keeps in
#: flight together: with more it interleaves each one's loads, work and store, so a step without
#: prefetch waits on a load latency per this many. On the H200 SE scales' fused 1x1 convs with 8 a
#: step ran 1.05-1.96x the conv alone (SASS interleaved), with 4 or fewer 0.91-1.14x (loads issued
#: first; bench/results/2026-12-04-h200-gemm-prologues).
_COMPUTED_LOADS_IN_FLIGHT = 4

#: Warps of the blocks ``GemmConfig.wide_micro_shapes`` are tried in: four, as cuBLAS's 128 x 128
#: SIMT tiles (a larger block of such thread tiles holds one block an SM)
WIDE_WARPS = 4

#: Elements a K-major shared row is padded by: keeps 16-byte alignment and moves the transposed
#: copy's rows 4 banks apart (a 4-way conflict on the once-per-step store, none on the reads).
K_MAJOR_PAD = 4


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """``C[S, I, J] = sum_K A[S, I, K] * B[S, J, K]`` after normalisation."""

    batch: int  # S
    rows: int  # I: output pixels (conv) or rows (matmul)
    cols: int  # J: output channels (conv) or columns (matmul)
    depth: int  # K
    dtype_bytes: int
    rows_contiguous: bool  # consecutive I are consecutive output addresses (NCHW conv)
    fetch_spatial_inner: Tuple[bool, bool]  # A, B: contiguous in memory along I/J rather than K
    #: A, B: indexed by the I/J iterator itself there (a matrix, not a conv's im2col window), with
    #: rows a whole number of vectors long, so a copy may move a vector at once
    fetch_vector_inner: Tuple[bool, bool] = (False, False)
    #: J must not be padded: the output indexes one axis by S and J together (a grouped conv's
    #: channel g * J + o), so a padded column would write the next group's outputs
    exact_cols: bool = False
    #: A, B: instructions an element's copy into shared memory computes besides the copy (an
    #: element-wise prologue inlined into the loads, :mod:`..base.prologue`); 0: a plain copy
    prologue_instructions: Tuple[int, int] = (0, 0)

    @property
    def computes_operands(self) -> bool:
        """Whether a staged operand is computed, not copied: then no ``cp.async`` (TVM would issue
        the computed copy as synchronous loads inside the pipeline, its latency exposed every step)."""
        return any(self.prologue_instructions)

    @property
    def flops(self) -> int:
        """Multiply-adds x 2."""
        return 2 * self.batch * self.rows * self.cols * self.depth


@dataclasses.dataclass(frozen=True)
class GemmTile:  # pylint: disable=too-many-instance-attributes
    """The tile one block computes, and what the cost model thought of it."""

    thread_rows: int  # threads along I
    thread_cols: int  # threads along J
    micro_rows: int  # accumulators per thread along I
    micro_cols: int  # accumulators per thread along J
    depth_step: int  # BK: K elements staged in shared memory per step
    split_k: int  # P: parts K is cut into (1: no split)
    prefetch: bool  # load step k+1 into registers while step k computes
    blocks: int
    shared_bytes: int
    registers_estimate: int
    blocks_per_multiprocessor: int
    time_s: float  # modelled time, split-K reduction included
    score: float  # modelled fraction of the FP32 peak
    unroll_explicit: bool = True  # TVM unrolls the thread tile's loops (else it leaves ``#pragma unroll`` to nvcc)
    vector_width: int = 1  # operands read from shared memory this many floats at a time (K-major tiles)
    async_stages: int = 0  # >1: shared tiles multi-buffered, filled by cp.async this many steps ahead
    unroll_depth: bool = False  # the loop over a K step's elements unrolled (``#pragma unroll``)
    #: lanes of a warp along the slow axis (the output's non-contiguous one) and the fast one
    #: (their product the profile's warp size): 0, 0 lays threads out as ``thread_rows x
    #: thread_cols`` (a warp spans consecutive threads of the fast axis); else a warp owns a
    #: ``warp_slow x warp_fast``-thread sub-tile and the warps tile the block
    warp_slow: int = 0
    warp_fast: int = 0
    #: ``"shared"`` (static, at most 48 KiB on CUDA) or ``"shared.dyn"`` (the profile's opt-in limit)
    shared_scope: str = "shared"
    #: epilogue operands constant along an output axis loaded into registers once per thread
    #: (``GemmConfig.stage_epilogue_operands``)
    stage_epilogue: bool = False
    #: a ``cp.async`` K loop of one barrier a step (``GemmConfig.one_barrier_steps``)
    one_barrier: bool = False

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.thread_rows * self.thread_cols

    @property
    def block_rows(self) -> int:
        """BM: outputs per block along I."""
        return self.thread_rows * self.micro_rows

    @property
    def block_cols(self) -> int:
        """BN: outputs per block along J."""
        return self.thread_cols * self.micro_cols

    def summary(self) -> str:
        """The tile in words, for reports."""
        vector = f", {self.vector_width}-wide shared loads" if self.vector_width > 1 else ""
        return (f"{self.block_rows}x{self.block_cols} outputs a block ({self.thread_rows}x{self.thread_cols} "
                f"threads x {self.micro_rows}x{self.micro_cols} accumulators{vector}), BK {self.depth_step}, "
                f"split K {self.split_k}, {self._prefetch_words()}, "
                f"{'epilogue operands staged, ' if self.stage_epilogue else ''}"
                f"{self.blocks} blocks, model {self.time_s * 1e6:.1f} us")

    def _prefetch_words(self) -> str:
        if self.async_stages > 1:
            extra = "".join([", K step unrolled" if self.unroll_depth else "",
                             ", one barrier a step" if self.one_barrier else "",
                             ", dynamic shared memory" if self.shared_scope == "shared.dyn" else "",
                             f", warps of {self.warp_slow}x{self.warp_fast} lanes" if self.warp_slow else ""])
            return f"prefetch by cp.async ({self.async_stages} shared buffers{extra})"
        return "prefetch" if self.prefetch else "no prefetch"


# ---- the cost model ----------------------------------------------------------------------------
def _registers(micro_rows: int, micro_cols: int, config) -> int:
    # accumulators, one column of A and one row of B, and the fixed part (ptxas on unrolled K
    # steps, sm_90: 113-125 registers for 8 x 8 against 120 estimated, 242 for 8 x 16 against 192)
    return micro_rows * micro_cols + micro_rows + micro_cols + config.fixed_registers


def rank_tiles(problem: GemmProblem, limits: GPULimits, config) -> List[GemmTile]:
    """Every admissible tile for ``problem``, best (lowest modelled time) first.

    Remembered for the same problem, limits and config values: a compile ranks a GEMM several
    times (the Winograd cost model, the fusion policy's part plans, then the rule that schedules
    it); :func:`clear_caches` forgets the rankings."""
    return _RANKED(problem, limits, config)


def _rank(problem: GemmProblem, limits: GPULimits, config) -> List[GemmTile]:
    """:func:`rank_tiles`, computed."""
    tiles = []
    narrowest = min(c for _, c in config.thread_shapes) * min(c for _, c in config.micro_shapes)
    shapes = config.thread_shapes + (config.narrow_thread_shapes if problem.cols < narrowest else ())
    for thread_rows, thread_cols in shapes:
        threads = thread_rows * thread_cols
        if threads % limits.profile.warp_size or threads > limits.profile.max_threads_per_block:
            continue
        wide = config.wide_micro_shapes if threads == WIDE_WARPS * limits.profile.warp_size else ()
        micro_shapes = tuple(dict.fromkeys(config.micro_shapes + wide + config.async_micro_shapes))
        for micro_rows, micro_cols in micro_shapes:
            only_async = (micro_rows, micro_cols) not in config.micro_shapes + wide
            for depth_step in depth_steps(problem, config):
                for split_k in _splits(problem, depth_step, config):
                    for tile in _tiles_of(problem, limits, config, thread_rows, thread_cols, micro_rows, micro_cols,
                                          depth_step, split_k, only_async):
                        tiles.append(tile)
    tiles.sort(key=rank_key)
    return tiles


def rank_key(tile: GemmTile) -> tuple:
    """The ranking's order: modelled time, then among equal times the larger block, the smaller
    split, prefetch, ``cp.async`` with the fewest stages, static shared memory, the default warp
    layout."""
    return (tile.time_s, -tile.block_rows * tile.block_cols, tile.split_k, not tile.prefetch, not tile.async_stages,
            tile.async_stages, tile.shared_scope != "shared", tile.warp_slow)


def _tiles_of(problem, limits, config, thread_rows, thread_cols, micro_rows, micro_cols, depth_step, split_k,
              only_async):
    """The tiles of one block shape, K step and split: each way of prefetching (none, through
    registers, by ``cp.async`` with each stage count and warp layout) and shared-read width."""
    threads = thread_rows * thread_cols
    steps = -(-problem.depth // (depth_step * split_k))
    # (prefetch, by cp.async, stages): none, through registers, and by cp.async where enabled;
    # a K loop of one step has nothing to overlap its loads with
    ways = ([] if only_async else [(False, False, 1)] + ([] if steps == 1 else [(True, False, 1)]))
    if config.async_copy and problem.depth // split_k >= _MIN_ASYNC_DEPTH and not problem.computes_operands:
        ways += [(True, True, s) for s in config.async_stages if s <= steps]
    slow_threads = thread_cols if problem.rows_contiguous else thread_rows
    fast_threads = thread_rows if problem.rows_contiguous else thread_cols
    warp = limits.profile.warp_size
    for (prefetch, by_async, stages), width in itertools.product(ways, config.vector_widths):
        if micro_rows % width or micro_cols % width:
            continue
        if problem.exact_cols and problem.cols % (thread_cols * micro_cols):
            continue
        if width > 1 and prefetch and not by_async and threads > _MAX_PREFETCH_VECTOR_THREADS:
            continue
        if width > 1 and problem.depth < _MIN_VECTOR_STEPS * depth_step * split_k:
            continue
        tile = _model(problem, limits, config, thread_rows, thread_cols, micro_rows, micro_cols, depth_step,
                      split_k, prefetch, width, by_async, stages)
        if tile is None:
            continue
        yield tile  # the default warp layout, then the others: the modelled time does not depend on it
        if by_async and width > 1:
            yield from (dataclasses.replace(tile, warp_slow=lanes, warp_fast=warp // lanes)
                        for lanes in config.warp_slow_lanes
                        if warp % lanes == 0 and slow_threads % lanes == 0 and fast_threads % (warp // lanes) == 0)


_RANKED = RememberedRanking(_rank, maxsize=256)


def clear_caches() -> None:
    """Forget the remembered rankings (``bench/compile_times.py`` times cold compiles)."""
    _RANKED.cache_clear()


def depth_steps(problem: GemmProblem, config) -> List[int]:
    """The K steps (BK) tried: ``config.depth_steps`` up to K, and K itself where it is shorter
    than the longest of them (one step, nothing padded). A GEMM of K = 1 takes only that: its K is
    a spatial iterator after normalisation (:mod:`.normalize`) and cannot be padded."""
    if problem.depth == 1:
        return [1]
    steps = [d for d in config.depth_steps if d <= problem.depth]
    if problem.depth < max(config.depth_steps) and problem.depth not in steps:
        steps.append(problem.depth)
    return steps


def _splits(problem: GemmProblem, depth_step: int, config) -> List[int]:
    splits = [1]
    while splits[-1] * 2 <= config.max_split_k:
        part = problem.depth / (splits[-1] * 2)
        if part < max(config.min_depth_per_split, depth_step):
            break
        splits.append(splits[-1] * 2)
    return splits


def _model(  # pylint: disable=too-many-arguments,too-many-locals
    problem: GemmProblem, limits: GPULimits, config, thread_rows: int, thread_cols: int,
    micro_rows: int, micro_cols: int, depth_step: int, split_k: int, prefetch: bool, vector_width: int,
    async_copy: bool = False, stages: Optional[int] = None,
) -> Optional[GemmTile]:
    """Modelled time of one tile choice, or None when it does not fit the hardware. ``stages``:
    the shared buffers of a ``cp.async`` tile (default: the two measured)."""
    threads = thread_rows * thread_cols
    block_rows, block_cols = thread_rows * micro_rows, thread_cols * micro_cols
    # Tiles far larger than the GEMM only compute padding.
    if block_rows > 2 * _ceil_to(problem.rows, 16) or block_cols > 2 * _ceil_to(problem.cols, 16):
        return None
    stages = (stages or _ASYNC_STAGES) if async_copy else 1
    shared = stages * _shared_elements(block_rows, block_cols, depth_step, vector_width) * problem.dtype_bytes
    dynamic = async_copy and config.dynamic_shared_memory and limits.kind == "cuda"
    scope = "shared.dyn" if dynamic and shared > limits.shared_limit("shared") else "shared"
    if shared > limits.shared_limit(scope):
        return None
    unrolled = async_copy and config.unroll_async_depth
    # register prefetch holds the next step's elements; cp.async writes them to shared directly
    staged = math.ceil((block_rows + block_cols) * depth_step / threads) if prefetch and not async_copy else 0
    registers = _registers(micro_rows, micro_cols, config) + staged
    if registers > limits.profile.max_registers_per_thread:
        return None
    per_sm = tile_occupancy(limits, threads, registers, shared).blocks_per_multiprocessor
    if per_sm == 0:
        return None
    if (stages > _ASYNC_STAGES or scope != "shared") and per_sm < config.min_resident_blocks:
        return None  # a lone block's barriers and pipeline waits are covered by no other block

    padded_rows = _ceil_to(problem.rows, block_rows)
    padded_cols = _ceil_to(problem.cols, block_cols)
    padded_depth = _ceil_to(problem.depth, depth_step * split_k)
    blocks = problem.batch * (padded_rows // block_rows) * (padded_cols // block_cols) * split_k

    # Issue cost of one block: each K element costs a thread TM*TN FMAs plus (TM+TN)/width shared
    # loads, and each K step a cooperative global->shared copy of (BM+BN)*BK elements and two barriers.
    fma = micro_rows * micro_cols
    per_k = fma + (micro_rows + micro_cols) // vector_width
    # a load and a store an element (cp.async is one instruction), and a prologue's work
    prologue_a, prologue_b = problem.prologue_instructions
    copy_per_step = math.ceil((block_rows + block_cols) * depth_step / threads) * (1 if async_copy else 2) + 4 \
        + math.ceil((block_rows * prologue_a + block_cols * prologue_b) * depth_step / threads)
    steps = padded_depth // split_k // depth_step
    warp_instr_per_block = (threads // limits.profile.warp_size) * steps * (depth_step * per_k + copy_per_step)

    # Waves: blocks run ``per_sm`` at a time on each SM. Per K step a block waits for its global
    # loads (then a barrier) before it computes; the SM's other resident blocks compute meanwhile.
    # So a step of the SM's blocks costs their issue time, but never less than one block's load
    # latency plus its own compute.
    sms = limits.profile.multiprocessor_count
    sm_rate = limits.warp_instructions_per_s / sms
    step_compute = warp_instr_per_block / steps / sm_rate
    if depth_step >= config.long_step_depth:
        step_compute *= 1 + config.long_step_slowdown
    # Prefetching overlaps a block's own loads with its compute: max instead of sum.
    latency = config.step_latency_s + config.load_latency_s * math.ceil(
        (block_rows + block_cols) * depth_step / threads)
    computed = math.ceil((block_rows * (prologue_a > 0) + block_cols * (prologue_b > 0)) * depth_step / threads)
    if not prefetch and computed > _COMPUTED_LOADS_IN_FLIGHT:
        latency *= math.ceil(computed / _COMPUTED_LOADS_IN_FLIGHT)
    # With S shared buffers a step waits for a copy issued S - 1 steps before: a share of the latency.
    hidden = latency / (stages - 1) if async_copy else latency
    # the prefetch's overhead, on every loop or on short ones only (``GemmConfig.prefetch_overhead_steps``)
    short_loop = not config.prefetch_overhead_steps or steps <= config.prefetch_overhead_steps
    overhead = config.prefetch_overhead_s if short_loop else 0.0
    lone_step = max(hidden + overhead, step_compute) if prefetch else latency + step_compute

    def wave_s(resident: int) -> float:
        return steps * max(resident * step_compute, lone_step)

    # The last, partial wave costs only the blocks it holds an SM: counted as a full wave, the
    # model preferred fewer resident blocks whenever they filled their last wave better
    # (bench/results/2026-12-03-h200-corpus-7, sweep 2).
    full_waves, tail_blocks = divmod(blocks, sms * per_sm)
    time = full_waves * wave_s(per_sm) + (wave_s(math.ceil(tail_blocks / sms)) if tail_blocks else 0.0)

    if split_k > 1:
        partial_bytes = split_k * problem.batch * padded_rows * padded_cols * problem.dtype_bytes
        time += 2 * partial_bytes / limits.profile.dram_bytes_per_s + config.launch_s
    ideal = problem.flops / (2 * limits.warp_instructions_per_s * limits.profile.warp_size)
    return GemmTile(thread_rows, thread_cols, micro_rows, micro_cols, depth_step, split_k, prefetch,
                    blocks, shared, registers, per_sm, time, ideal / time, config.unroll_explicit,
                    vector_width, stages if async_copy else 0, unrolled, shared_scope=scope,
                    stage_epilogue=config.stage_epilogue_operands,
                    one_barrier=config.one_barrier_steps and async_copy)


def _shared_elements(block_rows: int, block_cols: int, depth_step: int, vector_width: int) -> int:
    """Elements of the A and B tiles as the schedule (:mod:`.gemm`'s ``_cooperative_fetch``) pads
    them: rows of BK + 1, or BK where it is odd (scalar reads), or K-major rows of BM (or BN) + 4 (vector reads stay
    16-byte aligned)."""
    if vector_width > 1:
        return depth_step * (block_rows + block_cols + 2 * K_MAJOR_PAD)
    return (block_rows + block_cols) * (depth_step + 1 - depth_step % 2)


def _ceil_to(value: int, step: int) -> int:
    return -(-value // step) * step
