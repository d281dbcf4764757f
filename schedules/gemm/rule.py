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
  the next step is prefetched while this one computes (TVM's software pipeline: the loads'
  latency overlaps the FMAs), through registers (at the price of the staged registers) or, where
  the build enables it (:func:`tvm_fusion_hw.pass_context`) and K is long, by ``cp.async`` into a
  second shared buffer,
* split-K (``rfactor``): when even the smallest tile leaves SMs idle, K is cut into ``P`` parts run
  by ``P`` times as many blocks, each writing a partial sum, and a second kernel adds the parts and
  applies the epilogue,

by a cost model on the target's hardware profile (:mod:`.gemm_tiles`). ``cp.async`` tiles may
also keep 3 or 4 shared buffers (copies run that many steps ahead, the pipeline's drain unrolled
by TVM so its wait counts are constants), live in dynamic shared memory (``shared.dyn``) beyond
the static 48 KiB up to the profile's opt-in limit, unroll their K step's loop, and lay a warp's
lanes out as a sub-tile of the block (warp tiling, ``GemmTile.warp_slow``); see ``GemmConfig``. The epilogue (bias,
BatchNorm, activation, residual add) runs on the accumulators before the one global store, as in
dlight.

Measured on an H200 (``bench/results/2026-11-30-h200-tile-sweep``, each kernel alone): 2.3x
dlight's schedule on BERT's 4096x3072x768 GEMM with 128-bit shared loads (460 against 1044 us,
about 42 TFLOP/s of the 67 peak; 587 us with scalar loads), 1.7x on ResNet-50's 3x3 convs at
batch 32, 16x on its 7x7x512 3x3 conv at batch 1 (25 us, split K 16); whole ResNet-50 at batch 1:
4.85 ms with dlight's schedules of the same groups, 1.38 without prefetch, 1.23 with it; with
cp.async (``bench/results/2026-11-30-h200-stop10``) the GEMMs of BERT's layer at batch 32 run at
about 39 TFLOP/s (1.64 ms for the layer, torch.compile's cuBLAS 1.58).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Optional, Sequence, Tuple

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import (
    auto_inline_consumer_chain,
    auto_inline_producers,
    get_reduction_blocks,
)
from tvm.target import Target

from tvm_fusion_hw.plans import KernelPlan, as_plan
from tvm_fusion_hw.schedules.base import one_barrier
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.base.prologue import func_instructions, operand_instructions, selects_among_inputs
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.source_access import source_access
from tvm_fusion_hw.schedules.base.tir_match import const_int

from .epilogue import stage_broadcast_operands
from .groups import split_groups
from .normalize import gemm_index_maps, last_index_is_spatial, row_col_iters
from .config import GemmConfig
from .tiles import K_MAJOR_PAD, GemmProblem, GemmTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV

#: TVM's own opt-in for ``cp.async`` (its meta-schedule GEMMs use it too): the build must set it,
#: else the software pipeline lowers the async copies to plain loads and stores. ``cp.async``
#: needs sm_80 or newer.
ASYNC_COPY_CONFIG = "tirx.use_async_copy"
_ASYNC_COPY_MIN_SM = 80
#: Floats in one vector cp.async: 8 bytes. A 16-byte copy would make every access to the tile
#: float4-wide (the compute reads it in runs of 4), and TVM 0.27's StorageRewrite then retypes the
#: buffer to float4, whose scalar indices InjectPTXAsyncCopy rejects ("load->indices[0] lanes ==
#: store->indices[0] lanes"): every such kernel fell back to dlight.
_ASYNC_VECTOR = 2


class ImplicitGemm(TiledScheduleRule):
    """Matmul and conv2d (grouped too: a GEMM per group, :mod:`.groups`) in float32 with their
    epilogue, tiled on the profile.

    Returns ``None`` for anything dlight's ``Matmul`` would not normalise to a GEMM, for dynamic
    shapes, and for non-float32 GEMMs (dlight tensorizes float16 on tensor cores).
    """

    #: the search bounds; the class lives beside the tile model (:mod:`.tiles`)
    Config = GemmConfig

    def get_config(self, target: Target) -> "ImplicitGemm.Config":
        """The search bounds; the same for CUDA and ROCm (every block shape is at most 256
        threads, the most TVM 0.27's AMDGPU codegen compiles for, see kernel_resources), with
        ``cp.async`` where the target and the build allow it."""
        return ImplicitGemm.Config(async_copy=async_copy_enabled(target))

    # ---- the rule: TiledScheduleRule calls these ---------------------------------------------
    def prepare(self, func):
        """A grouped conv as one GEMM per group (:mod:`.groups`); anything else unchanged."""
        return split_groups(func)

    @staticmethod
    def match(sch, config, limits):  # pylint: disable=unused-argument
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
    a PassContext with ``tirx.use_async_copy`` (see :func:`tvm_fusion_hw.pass_context`)."""
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
    maps = gemm_index_maps(stmt)
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
    # the C map runs over the output's iterators (a grouped conv's channel is two of them)
    rows_contiguous = _last_axis_goes_to_rows(maps[3], len(maps[3].initial_indices))
    # the copies into shared memory read what the operand's producers read (a prologue is inlined
    # into them): a transposed operand coalesces along the other axis
    sources = [source_access(sch, gemm, i) for i in (0, 1)]
    rows_cols = row_col_iters(stmt, maps[0])
    spatial_inner = tuple(last_index_is_spatial(rows_cols, indices[-1]) for _, indices in sources)
    # a vector copy also needs every row of the operand to start on a vector boundary
    vector_inner = tuple(last_index_is_spatial(rows_cols, indices[-1], bare=True) and _rows_align(buf, _ASYNC_VECTOR)
                         for buf, indices in sources)
    prologue = (operand_instructions(sch, gemm, 0), operand_instructions(sch, gemm, 1))

    # dlight's normalisation: C[S, I, J] += A[S, I, K] * B[S, J, K] (K may be one element: .normalize)
    reindex_a = sch.reindex(gemm, ("read", 0))
    reindex_b = sch.reindex(gemm, ("read", 1))
    reindex_c = sch.reindex(gemm, ("write", 0))
    matmul_map, a_map, b_map, c_map = gemm_index_maps(sch.get(gemm))
    sch.transform_layout(reindex_a, ("write", 0), a_map)
    sch.transform_layout(reindex_b, ("write", 0), b_map)
    sch.transform_layout(reindex_c, ("read", 0), c_map)
    sch.transform_block_layout(gemm, matmul_map)

    extents = [const_int(iv.dom.extent) for iv in sch.get(gemm).iter_vars]
    if len(extents) != 4 or any(e is None for e in extents):
        return None
    batch, rows, cols, depth = extents
    if rows == 1 or cols == 1:
        return None  # a GEMV: RowReduction (rows of W contiguous along K) or dlight (a reduction per output)
    problem = GemmProblem(batch, rows, cols, depth, 4, rows_contiguous, spatial_inner, vector_inner,
                          exact_cols=_shares_output_axis(stmt), prologue_instructions=prologue)
    return problem, gemm


def prologue_plan(producers: Sequence[tirx.PrimFunc], consumer: tirx.PrimFunc, operand: int,
                  target: Target) -> Optional[KernelPlan]:
    """The plan ImplicitGemm would run ``consumer`` (a conv or matmul, unfused) with on ``target``
    once the ``producers`` of its argument ``operand`` (0: the data or left matrix, the GEMM's A;
    1: the weights or right matrix, B) are fused into its loads; None when the rule does not take
    the GEMM, or when a producer chooses each element among several inputs (a concatenation: a
    chain of compares an element that the plan does not count).

    The same problem as the fused PrimFunc's (the test suite checks that the rule's own plan of
    the fused kernel agrees), with the producers' work in every copy of that operand: a copy that
    computes (an element-wise producer) gets no ``cp.async``; one that only moves elements (a
    transpose, a reshape, a slice) keeps it, reading through the composed index.
    """
    rule = ImplicitGemm()
    if operand not in (0, 1) or not isinstance(target, Target) or not rule.is_target_available(target):
        return None
    if any(selects_among_inputs(f) for f in producers):
        return None
    planned = rule.plan(consumer, target)
    if planned is None:
        return None
    problem = planned[0]
    work = list(problem.prologue_instructions)
    work[operand] += sum(func_instructions(f) for f in producers)
    with target:
        tiles = rank_tiles(dataclasses.replace(problem, prologue_instructions=tuple(work)),
                           gpu_limits(target), rule.get_config(target))
    return as_plan(tiles[0], "ImplicitGemm") if tiles else None


def _last_axis_goes_to_rows(c_map: tirx.IndexMap, ndim: int) -> bool:
    """Whether the output's last axis lands in ``I`` (NCHW conv pixels) rather than ``J``."""
    variables = [tirx.Var(f"v{i}", "int64") for i in range(ndim)]
    s_i_j = c_map.map_indices(variables)
    def uses_last(expr) -> bool:
        return any(v.same_as(variables[-1]) for v in tirx.analysis.undefined_vars(expr, []))

    return uses_last(s_i_j[1]) and not uses_last(s_i_j[2])


def _shares_output_axis(stmt: s_tir.SBlock) -> bool:
    """Whether one output index moves with two spatial iterators that both index the weights
    (``C[n, g * J + o, ...]`` of a grouped conv): S and J then share that output axis."""
    weights = stmt.reads[1].region
    spatial = [iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.DataPar]

    def iterators(expr):
        used = tirx.analysis.undefined_vars(expr, [])
        return [s for s in spatial if any(v.same_as(s) for v in used)]

    in_weights = [s for s in spatial if any(s in iterators(r.min) for r in weights)]
    for rng in stmt.writes[0].region:
        shared = [s for s in iterators(rng.min) if s in in_weights]
        if len(shared) >= 2:
            return True
    return False


def _rows_align(buffer: tirx.Buffer, lanes: int) -> bool:
    """Whether ``buffer``'s innermost extent is a known multiple of ``lanes``."""
    extent = const_int(buffer.shape[-1])
    return extent is not None and extent % lanes == 0


# ---- the schedule ------------------------------------------------------------------------------
def _schedule(  # pylint: disable=too-many-locals
    sch: s_tir.Schedule, problem: GemmProblem, tile: GemmTile, gemm: SBlockRV
) -> None:
    if problem.depth == 1 and tile.depth_step * tile.split_k != 1:
        # a unit K is a spatial iterator after normalisation (.normalize): padding it would redo the init
        raise ValueError("a GEMM with K = 1 takes one K step of one element")
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
    ko, ki = sch.split(depth, [None, tile.depth_step])
    outer = [batch] + ([part] if final is not None else [])
    if tile.warp_slow:
        # Warp tiling: a warp's lanes are ``warp_slow`` along the slow axis times ``warp_fast``
        # along the fast one, each lane with its runs (strided by the lanes) and its adjacent slow
        # outputs; the warps tile the block. A warp then reads (BK x) its sub-tile's two edges
        # from shared memory, not a whole block-wide row.
        lanes_fast = tile.warp_fast
        if fast_threads % lanes_fast or slow_threads % tile.warp_slow:
            raise ValueError("the thread shape is not a whole number of warp sub-tiles")
        b_fast, w_fast, c_fast, l_fast, e_fast = sch.split(
            fast, [None, fast_threads // lanes_fast, fast_micro // width, lanes_fast, width])
        b_slow, w_slow, l_slow, i_slow = sch.split(slow, [None, slow_threads // tile.warp_slow, tile.warp_slow,
                                                         slow_micro])
        sch.reorder(*outer, b_slow, b_fast, c_fast, w_slow, w_fast, l_slow, l_fast, ko, ki, i_slow, e_fast)
        t_slow, t_fast = sch.fuse(w_slow, w_fast), sch.fuse(l_slow, l_fast)
    else:
        b_fast, c_fast, t_fast, e_fast = sch.split(fast, [None, fast_micro // width, fast_threads, width])
        b_slow, t_slow, i_slow = sch.split(slow, [None, slow_threads, slow_micro])
        sch.reorder(*outer, b_slow, b_fast, c_fast, t_slow, t_fast, ko, ki, i_slow, e_fast)
    sch.bind(c_fast, "vthread.x")
    sch.bind(sch.fuse(*outer), "blockIdx.z")
    sch.bind(b_slow, "blockIdx.y")
    sch.bind(b_fast, "blockIdx.x")
    sch.bind(t_slow, "threadIdx.y")
    sch.bind(t_fast, "threadIdx.x")
    if tile.unroll_depth:
        # a step's K elements unrolled: nvcc then loads the next element's fragments during this
        # element's FMAs, and the loop's counter and branch go (left rolled, 8 of 76 instructions
        # an element were loop overhead on a 128 x 128 tile, ptxas sm_90)
        sch.unroll(ki)
    sch.annotate(t_fast, ann_key="pragma_auto_unroll_max_step", ann_val=256)
    sch.annotate(t_fast, ann_key="pragma_unroll_explicit", ann_val=int(tile.unroll_explicit))

    local = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(local, t_fast, preserve_unit_loops=True)

    warp = tile.warp_slow * tile.warp_fast
    threads_y, threads_x = (tile.threads // warp, warp) if warp else (slow_threads, fast_threads)
    for index, spatial_inner in enumerate(problem.fetch_spatial_inner):
        _cooperative_fetch(sch, gemm, ko, index, spatial_inner, threads_y, threads_x,
                           tile.depth_step, tile.prefetch, width > 1, tile.async_stages > 1,
                           problem.fetch_vector_inner[index], tile.shared_scope)
    if width > 1:
        # Registers for one K element: the slow operand's run once per k, the fast one's per run.
        _vector_fragment(sch, gemm, 1 - fast_operand, ki, width)
        _vector_fragment(sch, gemm, fast_operand, ki, width)

    if final is None:
        auto_inline_consumer_chain(sch, local)
        if tile.stage_epilogue:
            stage_broadcast_operands(sch, local, t_fast)
    else:
        _schedule_split_sum(sch, final, tile.threads, problem.rows_contiguous)
    if tile.async_stages > 1:
        # ko's body: A to shared, B to shared, the compute. The copies run async_stages - 1 steps
        # ahead into their own buffers (cp.async, no registers staged).
        sch.annotate(ko, "software_pipeline_stage", [0, 0, tile.async_stages - 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
        sch.annotate(ko, "software_pipeline_async_stages", [0])
        if tile.one_barrier:
            one_barrier.mark(sch, ko)
        if tile.async_stages > 2:
            # The pipeline's drain waits for async_stages - 2, ..., 0 copies in flight: a loop
            # whose counts become constants only where TVM unrolls it itself (else codegen fails:
            # "cp_async_wait_group: immediate operands must become compile-time constants").
            sch.annotate(ko, "pragma_unroll_explicit", 1)
    elif tile.prefetch:
        # ko's body: A to registers, A to shared, B likewise, the compute. Steady state: load step
        # k+1 into registers, compute step k, then (after a barrier) store k+1 to shared.
        sch.annotate(ko, "software_pipeline_stage", [0, 0, 0, 0, 1])
        sch.annotate(ko, "software_pipeline_order", [0, 3, 1, 4, 2])
    sch.decompose_reduction(gemm, ko)


def _cooperative_fetch(  # pylint: disable=too-many-arguments
    sch: s_tir.Schedule, gemm: SBlockRV, ko, index: int, spatial_inner: bool,
    threads_y: int, threads_x: int, depth_step: int, prefetch: bool, k_major: bool,
    async_copy: bool = False, vector_inner: bool = False, scope: str = "shared",
) -> None:
    """Stage operand ``index``'s ``[1, B, BK]`` tile in shared memory, all threads copying.

    Consecutive threads copy along the axis that is contiguous in global memory (K for weights
    and row-major matrices, output pixels for a conv's input). Scalar tiles pad rows to an odd
    pitch (BK + 1, or BK where it is odd) so copies along pixels and the compute's reads hit distinct banks; vector tiles
    are stored K-major (``[1, BK, B]``, rows of B + 4) so a thread's run of outputs is contiguous.
    With ``async_copy`` the copy is left global -> shared for ``cp.async`` (the pipeline doubles
    the buffer); with ``prefetch`` alone it goes through registers.
    """
    fetch = sch.cache_read(gemm, index, scope)
    sch.compute_at(fetch, ko, preserve_unit_loops=True)
    _, spatial, depth = sch.get_loops(fetch)[-3:]
    if spatial_inner:
        sch.reorder(depth, spatial)
        fused = sch.fuse(depth, spatial)
    else:
        fused = sch.fuse(spatial, depth)
    # vector cp.async where both sides run along the same axis (a K-major tile of a matrix operand,
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
        sch.storage_align(fetch, 0, axis=1, factor=32, offset=K_MAJOR_PAD)
    elif depth_step % 2 == 0:
        # an odd pitch (BK + 1); an odd BK (a K shorter than the K steps tried) is one already
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
