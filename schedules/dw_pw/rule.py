"""A schedule rule for a depthwise conv (+ epilogue) followed by a pointwise conv (+ epilogue), as
ONE kernel.

MobileNet's bottlenecks end in a depthwise 3x3 conv (+ BN + ReLU6) whose output only the next
pointwise 1x1 conv reads. Our fusion pass can put the two in one PrimFunc
(``depthwise_conv->pointwise_conv``, with the policy knob ``pair_templates``); without a template
dlight splits it into two untiled kernels with the depthwise result in a global workspace. This
rule recognises the group from the TIR, not from names: an optional padding block, one depthwise
convolution ``dw[n, c, h, w] += data[n, c, h*sh + kh*dh, w*sw + kw*dw] * wd[c, 0, kh, kw]`` (as
:mod:`.depthwise_conv` matches it), an element-wise epilogue (bias, BatchNorm, ReLU6; it ends in
one block that the pointwise conv reads, such as the conv's identity padding), one pointwise
convolution ``pw[n, f, h, w] += E[n, c, h, w] * wp[f, c, 0, 0]`` (stride 1) and an optional
element-wise tail (bias, BatchNorm, a residual add). :func:`supports_pair` answers the same for
the two PrimFuncs before fusion, for the fusion policy, and :func:`pair_plan` gives the tile (threads,
registers, shared memory per block) this rule would run them with on a target. The matching is
in :mod:`.dw_pw_match`.

Structure. A block computes ``TH x TW`` pixels of one image for ``FT`` output channels: a GEMM of
``TH*TW`` pixels x ``FT`` channels over ``K = C``, its ``A`` operand the depthwise outputs, which
never go to global memory. The block loops over the channels in chunks of ``KC``; per chunk it

1. stages the chunk's input rows with their halo (the padding block computes straight into shared
   memory, whole rows per pass where they fit), the chunk's depthwise weights and the pointwise
   weights ``FT x KC`` (stored transposed, ``KC x FT``, so a thread's ``MF`` adjacent channels are
   one vector load) in shared memory, ``stage_unroll`` loads a thread in flight;
2. computes the ``KC x TH*TW`` depthwise outputs, epilogue applied, into a shared tile: threads as
   in the GEMM (channel group, pixel lane), each ``KC/TF`` channels x ``MP`` pixels, a channel's
   weights and epilogue parameters loaded once for its pixels;
3. accumulates the GEMM: each thread keeps ``MP x MF`` accumulators in registers, its pixels
   ``TP`` apart (a warp reads consecutive words of the shared tile: no bank conflicts) and its
   output channels adjacent (a broadcast among the threads of one channel group).

The pointwise epilogue (bias, BatchNorm, residual) runs on the accumulators before the one store.
The depthwise and GEMM loops stay rolled (``#pragma unroll 1``) but for ``unroll`` K steps, and the
kernel's ``__launch_bounds__`` name the planned blocks per SM, so that ptxas neither hoists a
whole pass's loads nor squeezes the kernel into spills for one more block (both seen on sm_90).

Tiles come from a cost model on the target's hardware profile (:mod:`.dw_pw_tiles`). On an H200
(ptxas, nvcc 13, sm_90), MobileNetV2's fused pairs at batch 1 get 128-256 threads, 15-45 KiB
shared and 44-64 registers; at batch 32 224-256 threads, 34-46 KiB and 53-72 registers; no
spills. Not measured on a GPU yet: the pair is not one of the policy's default pairs
(``FUSED_PAIR_TEMPLATES``) until it is.
"""

from __future__ import annotations

from typing import Optional, Tuple

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_fusion_hw.schedules.base.launch_bounds import with_min_blocks_per_multiprocessor
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import const_int

from .match import match_dw_pw_group, pair_problem
from .tiles import DwPwConfig, DwPwProblem, DwPwTile, rank_tiles

SBlockRV = s_tir.schedule.SBlockRV


class DepthwisePointwise(TiledScheduleRule):
    """Depthwise conv2d + epilogue + pointwise conv2d + epilogue (NCHW, float32), one kernel.

    Returns ``None`` for any PrimFunc that is not exactly such a group (see the module docstring),
    so that the next rule takes it.
    """

    #: the search bounds; the class lives beside the tile model (:mod:`.tiles`)
    Config = DwPwConfig

    def get_config(self, target: Target) -> "DepthwisePointwise.Config":
        """The search bounds for ``target``'s kind: at most 256 threads on both (TVM 0.27's AMDGPU
        codegen compiles every kernel for a work-group of at most 256, see kernel_resources); on
        ROCm no unroll pragma (TVM's LLVM codegen ignores it, and LLVM unrolls the loops itself)."""
        if target.kind.name == "rocm":
            return DepthwisePointwise.Config(stage_unroll=0)
        return DepthwisePointwise.Config()

    def finish(self, sch: s_tir.Schedule, tile) -> s_tir.Schedule:
        """Launch-bounded to the tile's modelled residency (see ``with_min_blocks_per_multiprocessor``)."""
        return with_min_blocks_per_multiprocessor(sch, tile.blocks_per_multiprocessor)

    # ---- the rule: TiledScheduleRule calls these three -----------------------------------------
    @staticmethod
    def match(sch, config, limits):  # pylint: disable=unused-argument
        """``(problem, *blocks)`` of the pattern in ``sch`` (surroundings inlined), or None."""
        return match_dw_pw_group(sch, config)

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
    """Whether DepthwisePointwise would take ``producer`` (a depthwise conv and its epilogue, as one
    PrimFunc) fused with ``consumer`` (a pointwise conv and its epilogue), judged on the two
    before fusion.

    For the fusion policy: fusing a pair this rule then declines leaves dlight two convolutions in
    one PrimFunc, which it can only split into two untiled kernels. The producer must be what
    :mod:`.depthwise_conv` matches (one depthwise conv, its padding, one epilogue chain) within this
    rule's limits, in float32; the consumer one 1x1 stride-1 conv (groups = 1) over the
    producer's channels and plane, its data read as is (or through an identity padding), and at
    most one element-wise tail. Tiles are not asked: a tile of one row and one channel a pass
    fits any GPU's shared memory (:func:`pair_plan` ranks them on a target).
    """
    return pair_problem(producer, consumer, DepthwisePointwise.Config()) is not None


def pair_plan(producer: tirx.PrimFunc, consumer: tirx.PrimFunc, target: Target) -> Optional[DwPwTile]:
    """The tile DepthwisePointwise would run ``producer`` fused with ``consumer`` with on
    ``target`` (its threads, registers estimate and shared bytes per block, the modelled time),
    or None when the rule cannot run the pair (see :func:`supports_pair`) or no tile fits.

    The same problem and ranking as ``DepthwisePointwise().plan`` on the fused PrimFunc, for a
    fusion policy that judges a pair by the kernel its template would make. At build time the rule
    takes the next ranked tile only when TVM compacts a shared buffer to more than planned.
    """
    rule = DepthwisePointwise()
    if not isinstance(target, Target) or not rule.is_target_available(target):
        return None
    config = rule.get_config(target)
    problem = pair_problem(producer, consumer, config)
    if problem is None:
        return None
    tiles = rank_tiles(problem, gpu_limits(target), config)
    return tiles[0] if tiles else None


# ---- the schedule ----------------------------------------------------------------------------
def _cooperative(sch: s_tir.Schedule, loops: list, plan: Tuple[str, int], threads: int, unroll: int) -> None:
    """Spread a staging block's ``loops`` (lines ..., then the contiguous run) over the threads,
    ``unroll`` iterations of the loop over passes unrolled (0: no pragma)."""
    mode, per_pass = plan
    if mode == "rows":
        outer, lines_i = sch.split(sch.fuse(*loops[:-1]), [None, per_pass])
        _, lane = sch.split(sch.fuse(lines_i, loops[-1]), [1, threads])
    else:
        outer, lane = sch.split(sch.fuse(*loops), [None, threads])
    sch.bind(lane, "threadIdx.x")
    if unroll:
        sch.annotate(outer, "pragma_unroll", unroll)


def _read_index(sch: s_tir.Schedule, block: SBlockRV, buffer: tirx.Buffer) -> int:
    """Position of ``buffer`` among ``block``'s reads (it moves once the reduction is decomposed)."""
    reads = [r.source for r in sch.get(block).reads]
    return next(i for i, b in enumerate(reads) if b.same_as(buffer))


def _schedule(  # pylint: disable=too-many-arguments,too-many-locals
    sch: s_tir.Schedule,
    problem: DwPwProblem,
    tile: DwPwTile,
    pad: Optional[SBlockRV],
    dw: SBlockRV,
    inter: Optional[SBlockRV],
    pw: SBlockRV,
    tail: Optional[SBlockRV],
) -> None:
    """Apply ``tile`` to the matched group (see the module docstring for the structure)."""
    threads, stage_unroll = tile.threads, tile.stage_unroll
    dw_stmt = sch.get(dw)
    dw_data_buf = dw_stmt.reads[problem.dw_data_read_index].source
    dw_weight_buf = dw_stmt.reads[problem.dw_weight_read_index].source

    # Step 3a. Tile the pointwise output: block = (n, channel tile, row tile, column tile);
    # threads = (channel group, pixel lane); each thread MF adjacent channels x MP pixels TP apart
    # (virtual threads: each pixel's accumulators and store are the thread's own).
    n, f, y, x, *red = sch.get_loops(pw)
    f_o, f_t, f_v = sch.split(f, [None, tile.channel_threads, tile.channels_per_thread])
    y_o, y_i = sch.split(y, [None, tile.rows])
    x_o, x_i = sch.split(x, [None, tile.cols])
    sch.reorder(n, f_o, y_o, x_o, f_t, y_i, x_i, f_v, *red)
    p_v, p_t = sch.split(sch.fuse(y_i, x_i), [tile.pixels_per_thread, tile.pixel_threads])
    rc = next(loop for loop, iv in zip(red, sch.get(pw).iter_vars[4:]) if const_int(iv.dom.extent) != 1)
    units = [loop for loop in red if not loop.same_as(rc)]
    rc_o, rc_m, rc_u = sch.split(rc, [None, tile.chunk // tile.unroll, tile.unroll])
    sch.reorder(p_v, f_t, p_t, rc_o, rc_m, rc_u, *units, f_v)
    bx = sch.fuse(n, f_o, y_o, x_o)
    tx = sch.fuse(f_t, p_t)
    sch.bind(bx, "blockIdx.x")
    sch.bind(p_v, "vthread.x")
    sch.bind(tx, "threadIdx.x")

    # Step 3b. Accumulators in registers; the tail (bias, BatchNorm, residual) on the way out.
    out = sch.cache_write(pw, 0, "local")
    if tail is not None:
        sch.reverse_compute_inline(tail)
    sch.reverse_compute_at(out, tx, preserve_unit_loops=True)

    # Step 3c. The chunk's pointwise weights in shared memory, transposed (KC x FT: a thread's MF
    # channels are adjacent), staged first so that one barrier serves all the staging.
    pw_weight = sch.cache_read(pw, problem.pw_weight_read_index, "shared")
    sch.transform_layout(pw_weight, ("write", 0), lambda a, b, c, d: (b, c, d, a))
    sch.compute_at(pw_weight, rc_o, preserve_unit_loops=True)
    _cooperative(sch, sch.get_loops(pw_weight)[-4:], ("flat", 0), threads, stage_unroll)

    # Step 3d. The depthwise outputs of the chunk, epilogue applied, in a shared tile: all
    # threads, consecutive threads on consecutive pixels; each output's taps in registers.
    if inter is None:
        inter = sch.cache_read(pw, problem.pw_data_read_index, "shared")
    else:
        sch.set_scope(inter, 0, "shared")
    sch.compute_at(inter, rc_o, preserve_unit_loops=True)
    # Threads as in the GEMM: (channel group, pixel lane), each thread KC/TF channels TF apart x
    # MP pixels TP apart (affine bindings, so the taps' reduction can be decomposed).
    _, i_c, i_y, i_x = sch.get_loops(inter)[-4:]
    i_co, i_ct = sch.split(i_c, [None, tile.channel_threads])
    i_pv, i_pt = sch.split(sch.fuse(i_y, i_x), [tile.pixels_per_thread, tile.pixel_threads])
    sch.reorder(i_ct, i_pt, i_co, i_pv)
    inter_t = sch.fuse(i_ct, i_pt)
    sch.bind(inter_t, "threadIdx.x")
    sch.set_scope(dw, 0, "local")
    sch.compute_at(dw, i_pv, preserve_unit_loops=True)
    dw_red = sch.get_loops(dw)[-(len(sch.get(dw).iter_vars) - 4):]
    for loop in dw_red:
        sch.unroll(loop)
    sch.decompose_reduction(dw, dw_red[0])

    # Step 3e. Stage the chunk's input (the padding block computes into shared memory) and the
    # depthwise weights in shared memory, all threads together.
    dw_weight = sch.cache_read(dw, _read_index(sch, dw, dw_weight_buf), "shared")
    sch.compute_at(dw_weight, rc_o, preserve_unit_loops=True)
    _cooperative(sch, sch.get_loops(dw_weight)[-4:], ("flat", 0), threads, stage_unroll)
    if pad is None:
        pad = sch.cache_read(dw, _read_index(sch, dw, dw_data_buf), "shared")
    else:
        sch.set_scope(pad, 0, "shared")
    sch.compute_at(pad, rc_o, preserve_unit_loops=True)
    _cooperative(sch, sch.get_loops(pad)[-4:], tile.input_load, threads, stage_unroll)

    # Step 3f. Unroll the register tiles; zero the accumulators before the channel loop.
    sch.annotate(i_co, "disable_unroll", True)
    sch.annotate(i_pv, "disable_unroll", True)
    sch.annotate(rc_m, "disable_unroll", True)
    for loop in [rc_u, *units, f_v]:
        sch.unroll(loop)
    for loop in sch.get_loops(out)[3:]:  # below blockIdx, vthread and threadIdx
        sch.unroll(loop)
    sch.decompose_reduction(pw, rc_o)
