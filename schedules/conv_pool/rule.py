"""A schedule rule for conv2d (NCHW) + element-wise epilogue + a pool, as ONE kernel.

Stock FuseOps never puts a convolution and a pool in one kernel (two "complex" groups); our fusion
pass does (``conv->window``), and without a template dlight splits the fused PrimFunc into two
untiled kernels with the conv result in a global workspace. This rule recognises the group from the
TIR, not from names: an optional padding block, one convolution ``conv[n, f, y, x] += data[n, rc,
y*sh + ry*dh, x*sw + rx*dw] * weight[f, rc, ry, rx]`` (groups = 1, weight ``[F, C, KH, KW]``; a
1x1 conv too), an element-wise chain (bias, ReLU, BatchNorm, ...), one window reduction
``pool[n, f, p, q] = max|sum(pool, E(conv[n, f, p*S + rv0, q*S' + rv1]))`` over a ``K x K'``
window with stride ``S <= K`` (the 2x2/2 pools of VGG, the overlapping 3x3/2 pools of AlexNet,
Inception and GoogLeNet), in floor or ceil mode, padded as after a ResNet stem (``prepare`` computes
the conv over the pool's padded plane, :mod:`.pool_padding`, so that no window reads outside the
conv), and an optional element-wise tail (the average's division). :func:`supports_pair` answers the same for the conv
and pool PrimFuncs before fusion, for a fusion policy, and :func:`pair_plan` gives the policy the
plan (threads, registers, shared memory per block) this rule would run them with on a target. The
matching is in :mod:`.conv_pool_match`.

Structure. The conv tile never leaves the chip and never goes through shared memory either: each
thread owns ``CV`` output channels x ``PHV x PWV`` whole pool windows, so it accumulates the
``CV x ((PHV-1)*S + K) x ((PWV-1)*S' + K')`` conv outputs they read in registers (overlapping
windows: a thread computes again the edge rows its neighbour computes), applies the epilogue and the pool there, and
writes only pooled values. A block (``CT x PHT x PWT`` threads: pooled width fastest, then height,
then channel groups) loops over the input channels in chunks of ``RC``: it stages the input chunk
with its halo (the padding block computes straight into shared memory, whole rows per pass,
coalesced along W; rows padded to a pitch that keeps the threads' vector loads free of bank
conflicts) and the weights ``(CT*CV) x RC x KH x KW``, then each thread reads its input window once
per channel (rows vectorised by the compiler) and its weights (one address per channel group: a
broadcast) for ``CV x K*PHV x K'*PWV x KH x KW`` FMAs, unrolled over the window and ``unroll``
channels.

Tiles come from a cost model on the target's hardware profile (:mod:`.conv_pool_tiles`).
Registers are kept at or below 128, where ptxas leaves a kernel alone (above, it squeezes the
kernel to the next occupancy step and spills). On an H200 (ptxas, nvcc 13): ``conv_relu_pool``
batch 1 gets 128 threads x 392 blocks, 71 registers, 11 KiB shared; batch 32 256 threads x 1568
blocks, 127 registers, 29 KiB shared; no spills. Measured there (bench/results/
2026-11-30-h200-after-conv-pool): 0.034 ms at batch 1 and 0.677 ms at batch 32, against stock
TVM's two kernels at 0.089 and 1.980 ms (the model had said 0.023 and 0.52 ms).
"""

from __future__ import annotations

from typing import Optional, Tuple

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_fusion_hw.plans import as_plan
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule

from .match import match_conv_pool_group, pair_problem
from .pool_padding import unpad_pool
from .shared_banks import BANKS
from .tiles import ConvPoolConfig, ConvPoolProblem, ConvPoolTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV


class ConvPool(TiledScheduleRule):
    """Conv2d (NCHW, groups = 1) + element-wise epilogue + max/avg pool, one kernel.

    Returns ``None`` for any PrimFunc that is not exactly such a group (see the module docstring),
    so that the next rule takes it.
    """

    #: the search bounds; the class lives beside the tile model (:mod:`.tiles`)
    Config = ConvPoolConfig

    def get_config(self, target: Target) -> "ConvPool.Config":
        """The search bounds for ``target``'s kind."""
        if target.kind.name == "rocm":
            # wave64; at most 256 work-items: TVM 0.27's AMDGPU codegen, built without an AMD GPU
            # present, compiles every kernel for a work-group of at most 256 (see
            # tvm_fusion_hw.feedback.kernel_resources), whatever the target says.
            return ConvPool.Config(min_threads=64, max_threads=256)
        return ConvPool.Config()

    # ---- the rule: TiledScheduleRule calls these -----------------------------------------------
    def prepare(self, func):
        """A padded pool's padding moved into the conv (:func:`.pool_padding.unpad_pool`)."""
        return unpad_pool(func)

    @staticmethod
    def match(sch, config, limits):  # pylint: disable=unused-argument
        """``(problem, *blocks)`` of the pattern in ``sch`` (surroundings inlined), or None."""
        return match_conv_pool_group(sch, config)

    @staticmethod
    def rank(problem, limits, config):
        """Tiles for ``problem``, best first."""
        return rank_tiles(problem, limits, config)

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        """Apply ``tile`` to the matched blocks."""
        _schedule(sch, problem, tile, *blocks)


# ---- the pair before fusion, for the fusion policy -------------------------------------------
def supports_pair(producer: tirx.PrimFunc, consumer: tirx.PrimFunc) -> bool:
    """Whether ConvPool would take ``producer`` (a conv and its epilogue, as one PrimFunc) fused
    with ``consumer`` (a pool PrimFunc), judged on the two before fusion.

    For a fusion policy: fusing a pair this rule then declines leaves dlight a conv and a pool in
    one PrimFunc, which it can only split into two untiled kernels. The producer must hold one
    conv this rule matches (groups = 1, its limits on kernel and stride), the consumer one window
    reduction of its input, stride at most the window; a padded or ceil-mode pool only where the
    producer's epilogue reads nothing else per pixel (:func:`.pool_padding.conv_extends`).
    """
    return pair_problem(producer, consumer, ConvPool.Config()) is not None


def pair_plan(producer: tirx.PrimFunc, consumer: tirx.PrimFunc, target: Target):
    """The plan ConvPool would run ``producer`` (a conv) fused with ``consumer`` (its pool) with on
    ``target``: a :class:`~.plans.KernelPlan` with the best-ranked tile's threads per block,
    registers per thread and shared bytes per block; None when the rule cannot run the pair
    (see :func:`supports_pair`) or no tile fits the target.

    The figures are those of ``ConvPool().plan`` on the fused PrimFunc (the same problem, ranked
    on the same limits), judged on the two before fusion. ``rank_tiles`` keeps the ranking, so the
    rule does not rank the fused PrimFunc again. At build time the rule takes the next ranked tile
    only when TVM compacts a shared buffer to more than planned (edge tiles).
    """
    rule = ConvPool()
    if not isinstance(target, Target) or not rule.is_target_available(target):
        return None
    config = rule.get_config(target)
    problem = pair_problem(producer, consumer, config)
    if problem is None:
        return None
    tiles = rank_tiles(problem, gpu_limits(target), config)
    if not tiles:
        return None
    return as_plan(tiles[0], "ConvPool")  # with its modelled time, for the pair's cost


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
    tile_rows, tile_cols = problem.conv_extent(tile.pooled_rows, tile.pooled_cols)

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
        sch.storage_align(pad, 0, ndim - 2, BANKS, tile.row_pitch % BANKS)
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
