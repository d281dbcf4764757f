"""A schedule rule for matmul and convolution as (implicit) GEMM, with the epilogue fused.

dlight's ``Matmul`` rule already brings both to ``C[S, I, J] += A[S, I, K] * B[S, J, K]`` (a conv
becomes an implicit GEMM: ``I`` = output pixels, ``J`` = output channels, ``K`` = input channels x
window, the im2col operand read straight from the input into shared memory, never materialised).
It then uses one tile for every GEMM on every GPU: 32 x 64 outputs per block, 4 x 4 per thread. On
an H200 that leaves ResNet-50's late layers at batch 1 with 16 blocks for 132 SMs (49 pixels x 512
channels), and large GEMMs limited by shared-memory reads (8 loads per 16 FMAs).

This rule keeps dlight's normalisation and chooses the tile per GEMM on the hardware profile:

* the block tile (``BM x BN``) and thread tile (``TM x TN`` accumulators in registers, in runs
  strided by the thread count so a warp's shared reads do not conflict): runs of one element read
  one float at a time, or runs of four from K-major tiles read with one 128-bit load (a quarter
  of the shared-load instructions per FMA, which is what limits the scalar loop on large GEMMs),
* the K step staged in shared memory (A and B tiles, ``(BM + BN) x BK`` elements), and whether
  the next step is prefetched into registers while this one computes (TVM's software pipeline:
  the loads' latency overlaps the FMAs at the price of the staged registers),
* split-K (``rfactor``): when even the smallest tile leaves SMs idle, K is cut into ``P`` parts run
  by ``P`` times as many blocks, each writing a partial sum, and a second kernel adds the parts and
  applies the epilogue,

by a cost model that counts waves of blocks over the SMs (register and shared-memory limits give
the blocks per SM), the issue cost of a thread tile (FMAs plus the shared loads that feed them), a
K step's load latency that other resident blocks (or prefetch) hide, and the partial sums' round
trip through memory. The epilogue (bias, BatchNorm, activation, residual add) runs on the
accumulators before the one global store, as in dlight.

Measured on an H200 (``bench/results/2026-11-30-h200-tile-sweep``, each kernel alone): 2.3x
dlight's schedule on BERT's 4096x3072x768 GEMM with 128-bit shared loads (460 against 1044 us,
about 42 TFLOP/s of the 67 peak; 587 us with scalar loads), 1.7x on ResNet-50's 3x3 convs at
batch 32, 16x on its 7x7x512 3x3 conv at batch 1 (25 us, split K 16); whole ResNet-50 at batch 1:
4.85 ms with dlight's schedules of the same groups, 1.38 without prefetch, 1.23 with it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import List, Optional, Tuple

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import (auto_inline_consumer_chain, auto_inline_producers,
                                         get_index_map, get_reduction_blocks)
from tvm.target import Target

from .common import GPULimits, TiledScheduleRule, const_int

SBlockRV = s_tir.schedule.SBlockRV

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

#: TVM's own opt-in for ``cp.async`` (its meta-schedule GEMMs use it too): the build must set it,
#: else the software pipeline lowers the async copies to plain loads and stores. ``cp.async``
#: needs sm_80 or newer.
ASYNC_COPY_CONFIG = "tirx.use_async_copy"
_ASYNC_COPY_MIN_SM = 80
#: Buffers of each shared tile when prefetching with ``cp.async``: step k+1 lands in one while
#: step k is read from the other (three stages measured no faster on the H200, tile sweep 4).
_ASYNC_STAGES = 2
_ASYNC_VECTOR = 4  # floats in one 16-byte cp.async

#: Elements a K-major shared row is padded by: keeps 16-byte alignment and moves the transposed
#: copy's rows 4 banks apart (a 4-way conflict on the once-per-step store, none on the reads).
_K_MAJOR_PAD = 4


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
    #: A, B: indexed by the I/J iterator itself there (a matrix, not a conv's im2col window), so
    #: consecutive I/J are consecutive addresses and a copy may move 16 bytes at once
    fetch_vector_inner: Tuple[bool, bool] = (False, False)

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
                f"{self.blocks} blocks, model {self.time_s * 1e6:.1f} us")


    def _prefetch_words(self) -> str:
        if self.async_stages > 1:
            return f"prefetch by cp.async ({self.async_stages} shared buffers)"
        return "prefetch" if self.prefetch else "no prefetch"


class ImplicitGemm(TiledScheduleRule):
    """Matmul and conv2d (groups = 1) in float32 with their epilogue, tiled on the profile.

    Returns ``None`` for anything dlight's ``Matmul`` would not normalise to a GEMM, for dynamic
    shapes, and for non-float32 GEMMs (dlight tensorizes float16 on tensor cores).
    """

    @dataclasses.dataclass
    class Config:  # pylint: disable=too-many-instance-attributes
        """Tile-search bounds; the hardware figures come from the target, not from here.

        Attributes
        ----------
        thread_shapes : tuple
            (threads along I, threads along J) tried. Four to eight warps: on the H200 blocks of one
            or two warps ran 1.3-2x slower than these at equal modelled time (tile sweep).
        micro_shapes : tuple
            (accumulators along I, along J) per thread tried.
        depth_steps : tuple
            BK values tried.
        max_split_k : int
            Largest split of K.
        min_depth_per_split : int
            Every part of a split K keeps at least this many K elements.
        step_latency_s : float
            Time a block waits for one K step's global loads and barrier when nothing overlaps it.
        load_latency_s : float
            What each further load a thread issues in a K step adds to that wait.
        prefetch_overhead_s : float
            What loading the next step into registers adds to a step that does not hide it (few
            FMAs a step): measured 0.2-0.3 us a step slower than the plain loop on MobileNetV2's
            small-K 1x1 convs at batch 1.
            The three are fitted to ``bench/tile_sweep.py`` on an H200 (2026-11-30, 20 GEMMs x 12-30
            tiles, ``bench/results/2026-11-30-h200-tile-sweep`` 2-prefetch and 3-vector-bk32): the
            model's pick is then 1.09x the fastest tile tried in geometric mean (1.18x before the
            last two terms), at worst 1.32x.
        fixed_registers : int
            Registers a thread needs besides its accumulators and operand fragments (addresses,
            loop counters, the staged loads): ptxas figures for this schedule.
        launch_s : float
            Cost of the extra kernel a split K adds.
        max_attempts : int
            Ranked tiles tried before giving up.
        vector_widths : tuple
            Shared-memory read widths tried: 1 (a thread's outputs strided by the thread count,
            scalar reads) or 4 (tiles stored K-major, a thread's outputs in runs of 4 read with one
            128-bit load: a quarter of the load instructions per FMA).
        async_copy : bool
            Prefetch with ``cp.async`` into double-buffered shared tiles instead of through
            registers (no staged registers, so 256-thread vector tiles may prefetch too). Set by
            :meth:`get_config` from the target and the build's PassContext (:func:`async_copy_enabled`).
            On the H200 it took BERT's GEMMs 10-11% and ResNet-50's 3x3 conv 8-19% below the
            register-staged prefetch (``bench/results/2026-11-30-h200-tile-sweep/4-cp-async``).
        unroll_explicit : bool
            TVM unrolls the thread tile's loops itself (True) or emits them with ``#pragma unroll``
            for nvcc/LLVM to unroll (False: about a third less compile time, same ptxas registers,
            and on the H200 0-5% faster kernels in the tile sweep).
        """

        thread_shapes: Tuple[Tuple[int, int], ...] = ((16, 16), (8, 16), (16, 8))
        micro_shapes: Tuple[Tuple[int, int], ...] = (
            (8, 8), (8, 4), (4, 8), (4, 4), (4, 2), (2, 4), (2, 2))
        depth_steps: Tuple[int, ...] = (8, 16, 32)
        max_split_k: int = 16
        min_depth_per_split: int = 128
        step_latency_s: float = 0.3e-6
        load_latency_s: float = 0.01e-6
        prefetch_overhead_s: float = 0.3e-6
        fixed_registers: int = 40
        launch_s: float = 3e-6
        max_attempts: int = 6
        unroll_explicit: bool = False
        vector_widths: Tuple[int, ...] = (1, 4)
        async_copy: bool = False

    def get_config(self, target: Target) -> "ImplicitGemm.Config":
        """The search bounds; the same for CUDA and ROCm (every block shape is at most 256
        threads, the most TVM 0.27's AMDGPU codegen compiles for, see kernel_resources), with
        ``cp.async`` where the target and the build allow it."""
        return ImplicitGemm.Config(async_copy=async_copy_enabled(target))

    # ---- the rule: TiledScheduleRule calls these three -----------------------------------------
    @staticmethod
    def match(sch, config):
        """``(problem, gemm_block)`` with the block normalised to ``[S, I, J, K]``, or None."""
        return _match_and_normalize(sch)

    @staticmethod
    def rank(problem, limits, config):
        """Tiles for ``problem``, best first."""
        return rank_tiles(problem, limits, config)

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply ``tile`` to the matched block."""
        _schedule(sch, problem, tile, *blocks)


def supports_async_copy(target: Target) -> bool:
    """Whether ``target`` has ``cp.async``: CUDA, sm_80 or newer."""
    if target.kind.name != "cuda":
        return False
    digits = "".join(itertools.takewhile(str.isdigit, str(target.attrs.get("arch", "")).lstrip("sm_")))
    return bool(digits) and int(digits) >= _ASYNC_COPY_MIN_SM


def async_copy_enabled(target: Target) -> bool:
    """Whether GEMM tiles may prefetch with ``cp.async``: ``target`` has it and the build runs under
    a PassContext with ``tirx.use_async_copy`` (see :func:`tvm_fusion_hw.pass_config`)."""
    return supports_async_copy(target) and bool(
        tvm.transform.PassContext.current().config.get(ASYNC_COPY_CONFIG, False))


def _match_and_normalize(sch: s_tir.Schedule) -> Optional[Tuple[GemmProblem, SBlockRV]]:
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    reductions = get_reduction_blocks(sch, sch.get_child_blocks(root))
    if reductions is None:
        return None
    gemm = reductions[0]
    stmt = sch.get(gemm)
    if len(stmt.writes) != 1 or len(stmt.reads) < 2:
        return None
    dtypes = {str(r.source.dtype) for r in stmt.reads} | {str(stmt.writes[0].source.dtype)}
    if dtypes != {"float32"}:
        return None
    maps = get_index_map(stmt)
    if maps is None:
        return None
    # Scalar blocks with no loops (ReLU6's clip bounds after legalization) would stop rfactor
    # (split K); every other path inlines them later anyway.
    for block in sch.get_child_blocks(root):
        if not sch.get_loops(block) and not sch.get(block).same_as(stmt):
            try:
                sch.compute_inline(block)
            except RuntimeError:  # ScheduleError: left for the epilogue inlining
                pass
    out_ndim = len(stmt.writes[0].source.shape)
    rows_contiguous = _last_axis_goes_to_rows(maps[3], out_ndim)
    spatial_inner = tuple(_last_index_is_spatial(stmt, i) for i in (0, 1))
    vector_inner = tuple(_last_index_is_spatial(stmt, i, bare=True) for i in (0, 1))

    # dlight's normalisation: C[S, I, J] += A[S, I, K] * B[S, J, K]
    reindex_a = sch.reindex(gemm, ("read", 0))
    reindex_b = sch.reindex(gemm, ("read", 1))
    reindex_c = sch.reindex(gemm, ("write", 0))
    matmul_map, a_map, b_map, c_map = get_index_map(sch.get(gemm))
    sch.transform_layout(reindex_a, ("write", 0), a_map)
    sch.transform_layout(reindex_b, ("write", 0), b_map)
    sch.transform_layout(reindex_c, ("read", 0), c_map)
    sch.transform_block_layout(gemm, matmul_map)

    extents = [const_int(iv.dom.extent) for iv in sch.get(gemm).iter_vars]
    if len(extents) != 4 or any(e is None for e in extents):
        return None
    batch, rows, cols, depth = extents
    if rows == 1 or cols == 1:
        return None  # a GEMV: dlight's GEMV rule (a reduction per output) fits it better
    problem = GemmProblem(batch, rows, cols, depth, 4, rows_contiguous, spatial_inner, vector_inner)
    return problem, gemm


def _last_axis_goes_to_rows(c_map: tirx.IndexMap, ndim: int) -> bool:
    """Whether the output's last axis lands in ``I`` (NCHW conv pixels) rather than ``J``."""
    variables = [tirx.Var(f"v{i}", "int64") for i in range(ndim)]
    s_i_j = c_map.map_indices(variables)
    def uses_last(expr) -> bool:
        return any(v.same_as(variables[-1]) for v in tirx.analysis.undefined_vars(expr, []))

    return uses_last(s_i_j[1]) and not uses_last(s_i_j[2])


def _last_index_is_spatial(stmt: s_tir.SBlock, read: int, bare: bool = False) -> bool:
    """Whether operand ``read``'s innermost index moves with a spatial iterator (not only K);
    with ``bare``, whether it is that iterator alone."""
    spatial = [iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
    last = stmt.reads[read].region[-1].min
    if bare:
        return any(last.same_as(s) for s in spatial)
    used = tirx.analysis.undefined_vars(last, [])
    return any(v.same_as(s) for v in used for s in spatial)


# ---- the cost model ----------------------------------------------------------------------------
def _registers(micro_rows: int, micro_cols: int, config) -> int:
    # accumulators, one column of A and one row of B, and the fixed part
    return micro_rows * micro_cols + micro_rows + micro_cols + config.fixed_registers


def rank_tiles(problem: GemmProblem, limits: GPULimits, config) -> List[GemmTile]:
    """Every admissible tile for ``problem``, best (lowest modelled time) first."""
    tiles = []
    for thread_rows, thread_cols in config.thread_shapes:
        threads = thread_rows * thread_cols
        if threads % limits.warp_size or threads > limits.max_threads_per_block:
            continue
        for micro_rows, micro_cols in config.micro_shapes:
            for depth_step in config.depth_steps:
                for split_k in _splits(problem, depth_step, config):
                    for prefetch, width in itertools.product((True, False), config.vector_widths):
                        if micro_rows % width or micro_cols % width:
                            continue
                        staged_async = prefetch and config.async_copy
                        if width > 1 and prefetch and not staged_async and threads > _MAX_PREFETCH_VECTOR_THREADS:
                            continue
                        if width > 1 and problem.depth < _MIN_VECTOR_STEPS * depth_step * split_k:
                            continue
                        tile = _model(problem, limits, config, thread_rows, thread_cols, micro_rows,
                                      micro_cols, depth_step, split_k, prefetch, width, staged_async)
                        if tile is None and staged_async and (width == 1 or threads <= _MAX_PREFETCH_VECTOR_THREADS):
                            # double buffers too large for shared memory: prefetch through registers
                            tile = _model(problem, limits, config, thread_rows, thread_cols, micro_rows,
                                          micro_cols, depth_step, split_k, prefetch, width, False)
                        if tile is not None:
                            tiles.append(tile)
    tiles.sort(key=lambda t: (t.time_s, -t.block_rows * t.block_cols, t.split_k, not t.prefetch))
    return tiles


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
    async_copy: bool = False,
) -> Optional[GemmTile]:
    """Modelled time of one tile choice, or None when it does not fit the hardware."""
    threads = thread_rows * thread_cols
    block_rows, block_cols = thread_rows * micro_rows, thread_cols * micro_cols
    # Tiles far larger than the GEMM only compute padding.
    if block_rows > 2 * _ceil_to(problem.rows, 16) or block_cols > 2 * _ceil_to(problem.cols, 16):
        return None
    stages = _ASYNC_STAGES if async_copy else 1
    shared = stages * _shared_elements(block_rows, block_cols, depth_step, vector_width) * problem.dtype_bytes
    if shared > limits.shared_memory_bytes_per_block:
        return None
    # register prefetch holds the next step's elements; cp.async writes them to shared directly
    staged = math.ceil((block_rows + block_cols) * depth_step / threads) if prefetch and not async_copy else 0
    registers = _registers(micro_rows, micro_cols, config) + staged
    if registers > limits.max_registers_per_thread:
        return None
    per_sm = _blocks_per_multiprocessor(limits, threads, registers, shared)
    if per_sm == 0:
        return None

    padded_rows = _ceil_to(problem.rows, block_rows)
    padded_cols = _ceil_to(problem.cols, block_cols)
    padded_depth = _ceil_to(problem.depth, depth_step * split_k)
    blocks = problem.batch * (padded_rows // block_rows) * (padded_cols // block_cols) * split_k

    # Issue cost of one block: each K element costs a thread TM*TN FMAs plus (TM+TN)/width shared
    # loads, and each K step a cooperative global->shared copy of (BM+BN)*BK elements and two barriers.
    fma = micro_rows * micro_cols
    per_k = fma + (micro_rows + micro_cols) // vector_width
    # a load and a store an element; cp.async is one instruction
    copy_per_step = math.ceil((block_rows + block_cols) * depth_step / threads) * (1 if async_copy else 2) + 4
    steps = padded_depth // split_k // depth_step
    warp_instr_per_block = (threads // limits.warp_size) * steps * (depth_step * per_k + copy_per_step)

    # Waves: blocks run ``resident`` at a time on each SM. Per K step a block waits for its global
    # loads (then a barrier) before it computes; the SM's other resident blocks compute meanwhile.
    # So a step of the SM's blocks costs their issue time, but never less than one block's load
    # latency plus its own compute.
    sms = limits.multiprocessor_count
    resident = min(per_sm, math.ceil(blocks / sms))
    waves = math.ceil(blocks / (sms * per_sm))
    sm_rate = limits.warp_instructions_per_s / sms
    step_compute = warp_instr_per_block / steps / sm_rate
    # Prefetching overlaps a block's own loads with its compute: max instead of sum.
    latency = config.step_latency_s + config.load_latency_s * math.ceil(
        (block_rows + block_cols) * depth_step / threads)
    lone_step = max(latency + config.prefetch_overhead_s, step_compute) if prefetch else latency + step_compute
    time = waves * steps * max(resident * step_compute, lone_step)

    if split_k > 1:
        partial_bytes = split_k * problem.batch * padded_rows * padded_cols * problem.dtype_bytes
        time += 2 * partial_bytes / limits.dram_bytes_per_s + config.launch_s
    ideal = problem.flops / (2 * limits.warp_instructions_per_s * limits.warp_size)
    return GemmTile(thread_rows, thread_cols, micro_rows, micro_cols, depth_step, split_k, prefetch,
                    blocks, shared, registers, per_sm, time, ideal / time, config.unroll_explicit,
                    vector_width, stages if async_copy else 0)


def _shared_elements(block_rows: int, block_cols: int, depth_step: int, vector_width: int) -> int:
    """Elements of the A and B tiles as ``_cooperative_fetch`` pads them: rows of BK + 1 (scalar
    reads), or K-major rows of BM (or BN) + 4 (vector reads stay 16-byte aligned)."""
    if vector_width > 1:
        return depth_step * (block_rows + block_cols + 2 * _K_MAJOR_PAD)
    return (block_rows + block_cols) * (depth_step + 1)


def _blocks_per_multiprocessor(limits: GPULimits, threads: int, registers: int, shared: int) -> int:
    by_threads = limits.max_threads_per_multiprocessor // threads
    by_registers = limits.registers_per_multiprocessor // (_ceil_to(registers, 8) * threads)
    by_shared = limits.shared_memory_bytes_per_multiprocessor // (
        shared + limits.shared_memory_reserved_bytes_per_block)
    return max(0, min(by_threads, by_registers, by_shared, limits.max_blocks_per_multiprocessor))


def _ceil_to(value: int, step: int) -> int:
    return -(-value // step) * step


# ---- the schedule ------------------------------------------------------------------------------
def _schedule(  # pylint: disable=too-many-locals
    sch: s_tir.Schedule, problem: GemmProblem, tile: GemmTile, gemm: SBlockRV
) -> None:
    sch.pad_einsum(gemm, [1, tile.block_rows, tile.block_cols, tile.depth_step * tile.split_k])
    batch, rows, cols, depth = sch.get_loops(gemm)
    final = None
    if tile.split_k > 1:
        part, depth = sch.split(depth, [tile.split_k, None])
        final = gemm
        gemm = sch.rfactor(part, factor_axis=0)
        batch, rows, cols, part, depth = sch.get_loops(gemm)

    # threadIdx.x runs along the output's contiguous axis, so a warp's stores coalesce. Along it a
    # thread's outputs come in runs of ``width`` (1 or 4) strided by the thread count: a warp then
    # reads consecutive shared addresses (no bank conflicts) and stores consecutive addresses.
    # Along the other axis its outputs are adjacent (a warp spans one or two of them: broadcasts).
    # Scalar tiles make the strided runs virtual threads (each with its own accumulators and
    # store); vector tiles keep them a loop, whose runs are read with one 128-bit load each.
    if problem.rows_contiguous:
        fast, fast_threads, fast_micro, slow, slow_threads, slow_micro = (
            rows, tile.thread_rows, tile.micro_rows, cols, tile.thread_cols, tile.micro_cols)
        fast_operand = 0
    else:
        fast, fast_threads, fast_micro, slow, slow_threads, slow_micro = (
            cols, tile.thread_cols, tile.micro_cols, rows, tile.thread_rows, tile.micro_rows)
        fast_operand = 1
    width = tile.vector_width
    b_fast, c_fast, t_fast, e_fast = sch.split(fast, [None, fast_micro // width, fast_threads, width])
    b_slow, t_slow, i_slow = sch.split(slow, [None, slow_threads, slow_micro])
    ko, ki = sch.split(depth, [None, tile.depth_step])
    outer = [batch] + ([part] if final is not None else [])
    sch.reorder(*outer, b_slow, b_fast, c_fast, t_slow, t_fast, ko, ki, i_slow, e_fast)
    sch.bind(c_fast, "vthread.x")
    sch.bind(sch.fuse(*outer), "blockIdx.z")
    sch.bind(b_slow, "blockIdx.y")
    sch.bind(b_fast, "blockIdx.x")
    sch.bind(t_slow, "threadIdx.y")
    sch.bind(t_fast, "threadIdx.x")
    sch.annotate(t_fast, ann_key="pragma_auto_unroll_max_step", ann_val=256)
    sch.annotate(t_fast, ann_key="pragma_unroll_explicit", ann_val=int(tile.unroll_explicit))

    local = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(local, t_fast, preserve_unit_loops=True)

    for index, spatial_inner in enumerate(problem.fetch_spatial_inner):
        _cooperative_fetch(sch, gemm, ko, index, spatial_inner, slow_threads, fast_threads,
                           tile.depth_step, tile.prefetch, width > 1, tile.async_stages > 1,
                           problem.fetch_vector_inner[index])
    if width > 1:
        # Registers for one K element: the slow operand's run once per k, the fast one's per run.
        _vector_fragment(sch, gemm, 1 - fast_operand, ki, width)
        _vector_fragment(sch, gemm, fast_operand, ki, width)

    if final is None:
        auto_inline_consumer_chain(sch, local)
    else:
        _schedule_split_sum(sch, final, tile.threads, problem.rows_contiguous)
    if tile.async_stages > 1:
        # ko's body: A to shared, B to shared, the compute. The copies run async_stages - 1 steps
        # ahead into their own buffers (cp.async, no registers staged).
        sch.annotate(ko, "software_pipeline_stage", [0, 0, tile.async_stages - 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
        sch.annotate(ko, "software_pipeline_async_stages", [0])
    elif tile.prefetch:
        # ko's body: A to registers, A to shared, B likewise, the compute. Steady state: load step
        # k+1 into registers, compute step k, then (after a barrier) store k+1 to shared.
        sch.annotate(ko, "software_pipeline_stage", [0, 0, 0, 0, 1])
        sch.annotate(ko, "software_pipeline_order", [0, 3, 1, 4, 2])
    sch.decompose_reduction(gemm, ko)


def _cooperative_fetch(  # pylint: disable=too-many-arguments
    sch: s_tir.Schedule, gemm: SBlockRV, ko, index: int, spatial_inner: bool,
    threads_y: int, threads_x: int, depth_step: int, prefetch: bool, k_major: bool,
    async_copy: bool = False, vector_inner: bool = False,
) -> None:
    """Stage operand ``index``'s ``[1, B, BK]`` tile in shared memory, all threads copying.

    Consecutive threads copy along the axis that is contiguous in global memory (K for weights
    and row-major matrices, output pixels for a conv's input). Scalar tiles pad rows to an odd
    pitch (BK + 1) so copies along pixels and the compute's reads hit distinct banks; vector tiles
    are stored K-major (``[1, BK, B]``, rows of B + 4) so a thread's run of outputs is contiguous.
    With ``async_copy`` the copy is left global -> shared for ``cp.async`` (the pipeline doubles
    the buffer); with ``prefetch`` alone it goes through registers.
    """
    fetch = sch.cache_read(gemm, index, "shared")
    sch.compute_at(fetch, ko, preserve_unit_loops=True)
    _, spatial, depth = sch.get_loops(fetch)[-3:]
    if spatial_inner:
        sch.reorder(depth, spatial)
        fused = sch.fuse(depth, spatial)
    else:
        fused = sch.fuse(spatial, depth)
    # 16-byte cp.async where both sides run along the same axis (a K-major tile of a matrix operand,
    # indexed by I or J itself) and every thread copies whole vectors; else 4 bytes an element.
    extent = const_int(sch.get(fused).extent)
    whole = extent is not None and extent % (threads_y * threads_x * _ASYNC_VECTOR) == 0
    vector = _ASYNC_VECTOR if async_copy and k_major and vector_inner and whole else 1
    if vector > 1:
        _, ty, tx, lanes = sch.split(fused, [None, threads_y, threads_x, vector])
        sch.vectorize(lanes)
    else:
        _, ty, tx = sch.split(fused, [None, threads_y, threads_x])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    if k_major:
        sch.transform_layout(fetch, ("write", 0), lambda s, x, k: (s, k, x))
        sch.storage_align(fetch, 0, axis=1, factor=32, offset=_K_MAJOR_PAD)
    else:
        sch.storage_align(fetch, 0, axis=1, factor=depth_step, offset=1)
    if prefetch and not async_copy:
        # global -> registers -> shared, so the pipeline can issue the next step's loads early
        sch.annotate(fetch, "tirx.manifest_shared_memory_local_stage", 1)
    auto_inline_producers(sch, fetch)


def _vector_fragment(sch: s_tir.Schedule, gemm: SBlockRV, index: int, loop, width: int) -> None:
    """Read operand ``index`` from its K-major shared tile into registers under ``loop``, ``width``
    contiguous elements per 128-bit load."""
    fragment = sch.cache_read(gemm, index, "local")
    sch.compute_at(fragment, loop, preserve_unit_loops=True)
    inner = sch.get_loops(fragment)[-1]
    _, lanes = sch.split(inner, [None, width])
    sch.vectorize(lanes)


def _schedule_split_sum(sch: s_tir.Schedule, final: SBlockRV, threads: int, rows_contiguous: bool) -> None:
    """The second kernel of a split K: each thread adds one output's parts, then the epilogue."""
    local = sch.cache_write(final, 0, "local")
    batch, rows, cols, part = sch.get_loops(final)
    spatial = [batch, cols, rows] if rows_contiguous else [batch, rows, cols]
    sch.reorder(*spatial, part)
    bx, tx = sch.split(sch.fuse(*spatial), [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.reverse_compute_at(local, tx, preserve_unit_loops=True)
    auto_inline_consumer_chain(sch, local)
    sch.decompose_reduction(final, part)
