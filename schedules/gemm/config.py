"""ImplicitGemm's tile-search bounds and the tile model's fitted constants, beside the model
(:mod:`.tiles`): the hardware figures come from the target, not from here."""

from __future__ import annotations

import dataclasses
from typing import Tuple


@dataclasses.dataclass
class GemmConfig:  # pylint: disable=too-many-instance-attributes
    """Tile-search bounds (``ImplicitGemm.Config``); the hardware figures come from the target, not from here.

    Attributes
    ----------
    thread_shapes : tuple
        (threads along I, threads along J) tried. Four to eight warps: on the H200 blocks of one
        or two warps ran 1.3-2x slower than these at equal modelled time (tile sweep).
    narrow_thread_shapes : tuple
        More shapes, with few threads along J, tried only for GEMMs narrower than the smallest
        block ``thread_shapes`` make (grouped convolutions).
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
        last two terms), at worst 1.32x. Counting the last partial wave by the blocks it holds
        brought the corpus' 20 heaviest GEMMs from 1.11x to 1.04x (worst 1.61x to 1.15x;
        ``bench/results/2026-12-03-h200-corpus-8``, ``bench/gemm_model_check.py``).
    prefetch_overhead_steps : int
        K loops of at most this many steps pay ``prefetch_overhead_s`` (0: every loop). Timed pairs
        of tiles that differ only in register prefetch (``bench/gemm_model_check.py
        --prefetch-pairs``, 107 sweeps in ``bench/results``): on loops of more than 8 steps at BK
        8, prefetch ran 0.74-0.81x what the model gives it against no prefetch, on short loops
        1.14x; with 8, the pairs of longer loops come within 0.96-1.01x and the pick goes from
        1.087x to 1.080x the fastest tile (worst 1.44x to 1.35x). 0 by default: end to end
        (``bench/results/2026-12-07-h100-corpus-12``) 8 made DeiT-T, GPT-2 and LLaMA 2-4% faster at
        batch 32 and ViT-B's P . V 1.24x slower (small prefetching blocks, whose per-step cost the
        overhead also stood for); the rest of the corpus is not timed.
    long_step_depth, long_step_slowdown : int, float
        K steps (BK) at least ``long_step_depth`` deep issue ``1 + long_step_slowdown`` times slower
        than their instruction count: measured over modelled time is 0.8-0.9 at BK 8, 1.3-1.5 at 16
        and 1.5-2.5 at 32 on the H100 MLP sweep (``bench/results/2026-12-06-h100-build-kernels``;
        the cause is not identified). 0.3 on BK 32, fitted over the 73 GEMMs of the sweeps in
        ``bench/results`` (``bench/gemm_model_check.py --set``), brings the pick from 1.071x to 1.062x
        the fastest tile (H100 MLP GEMMs 1.155x to 1.035x). Off: end to end on an H100 it changed
        659 of the corpus' 1994 GEMM tiles and ran 0.975x at batch 32 but 1.012x at batch 1 (ViT
        0.94, Mixer 0.90; ResNet-50, Inception-v3, ConvNeXt 1.05-1.11, whose short-M split-K convs
        ran best at BK 32: ``bench/results/2026-12-06-gemm-long-steps``), so BK alone is not the cause.
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
        ``ImplicitGemm.get_config`` from the target and the build's PassContext (``async_copy_enabled``).
        On the H200 BERT's large GEMMs and ResNet-50's 3x3 convs ran about 10% faster with it
        (``bench/results/2026-11-30-h200-tile-sweep/4-cp-async``); short K loops ran slower,
        so the ranking offers it only where K is long (``tiles._MIN_ASYNC_DEPTH``).
    unroll_explicit : bool
        TVM unrolls the thread tile's loops itself (True) or emits them with ``#pragma unroll``
        for nvcc/LLVM to unroll (False: about a third less compile time, same ptxas registers,
        and on the H200 0-5% faster kernels in the tile sweep).
    async_stages : tuple
        Shared buffers a ``cp.async`` tile may have (copies run ``stages - 1`` K steps ahead):
        a step then waits for a copy issued ``stages - 1`` steps earlier, so the model divides the
        step's load latency by ``stages - 1`` (a deeper pipeline only pays where one step's
        compute is shorter than that latency), and the buffers multiply the tile's shared memory
        (fewer resident blocks). Only loops of at least ``stages`` steps get them.
        ``(2,)``: the form measured in ``bench/results/2026-11-30-h200-stop10``.
    unroll_async_depth : bool
        ``cp.async`` tiles unroll their loop over a step's K elements (``GemmTile.unroll_depth``),
        a code-generation choice the model does not rank (like ``unroll_explicit``). SASS (sm_90)
        of a 128 x 128 tile with 8 x 8 per thread, BK 16: rolled, 76 instructions per K element
        of which 64 FFMA and 8 the loop's, 79% FFMA over a step; unrolled 88% (89% at BK 32; the
        rest is cp.async addressing), and nvcc can load the next element's fragments during this
        one's FMAs. On by default: on the H200 it won all 9 same-tile pairs of the static 2-buffer
        form by 0.6-12% at no compile-time cost (``bench/results/2026-12-02-h200-corpus-4``).
        False: the rolled form measured in stop10.
    dynamic_shared_memory : bool
        ``cp.async`` tiles beyond the static limit (48 KiB on CUDA) live in ``shared.dyn`` up to
        the profile's opt-in limit (``GPULimits.dynamic_shared_memory_bytes_per_block``).
    min_resident_blocks : int
        Blocks per SM a tile with more than two buffers or in dynamic shared memory must keep
        resident: with one, nothing covers its barriers and pipeline waits, which the model does
        not count (it would rank a 4-stage 128 x 128 tile at one block an SM first).
    async_micro_shapes : tuple
        Thread tiles tried for ``cp.async`` tiles only, besides ``micro_shapes`` (e.g. (8, 16):
        128 x 256 blocks, 242 registers under ptxas, one block per SM). Empty by default: not
        measured.
    wide_micro_shapes : tuple
        Thread tiles of more accumulators than ``micro_shapes`` (e.g. (8, 16), (16, 8)) tried in
        blocks of four warps only (``tiles.WIDE_WARPS``): on CUDA 128 x 128 outputs a block, 128 a
        thread, the tile cuBLAS runs DeiT-T's batch-32 qkv GEMM (6304 x 576 x 192) with, 40.6 us on
        an H100 against 61.3 for this rule's pick and 49.8 for the fastest tile swept
        (``bench/results/2026-12-07-h100-corpus-11``). ptxas (sm_90): 167-254 registers, no spills,
        so two blocks an SM. In 256-thread blocks the same thread tiles (128 x 256 blocks, one an SM) ran
        slower (``new-big``). Empty by default: timed in ``bench/results/2026-12-07-h100-corpus-12``,
        the wide tile is the fastest on 1 of 16 transformer GEMMs and makes ViT-B and LLaMA slower
        end to end (the model, which ranks it first on 6, counts no latency it leaves unhidden).
    stage_epilogue_operands : bool
        Load each epilogue operand that is the same along one output axis (a bias, a per-channel
        scale) into registers once per thread, before the write-back (``GemmTile.stage_epilogue``).
        Without it the write-back loads it once per output, under the output's bounds guard, and
        nvcc does not hoist the load. Under ncu on an H100 (``bench/results/2026-12-07-h100-corpus-13``),
        our copy of cuBLAS's tile for DeiT-T's qkv issues 113.5 k bias loads to cuBLAS's 0.9 k and
        stalls on global memory 8x as long. ptxas (sm_90) counts 112 fewer loads on that tile, and 32 more registers. The
        model does not rank it. Off by default: not yet timed.
    one_barrier_steps : bool
        ``cp.async`` tiles of 2-4 buffers wait for a step's copies before they issue the next, so a
        K step needs one barrier, not TVM's two (``GemmTile.one_barrier``, :mod:`..base.one_barrier`):
        under ncu our small tiles stall on the two barriers of each step
        (``bench/results/2026-12-07-h100-corpus-13``). The model does not rank it. Off by default:
        not yet timed.
    warp_slow_lanes : tuple
        Warp tiling for ``cp.async`` vector tiles: a warp's lanes ``L`` along the slow axis by
        ``warp_size / L`` along the fast one, each warp a sub-tile (``GemmTile.warp_slow``). It
        reads fewer shared bytes a K element (a 32 x 64 warp tile: 96 floats, against 144 for the
        default 16 x 128), which the model does not count (shared bandwidth is not in it), so it
        ranks level with the tile it changes and after it. Empty by default: not measured.
    """

    thread_shapes: Tuple[Tuple[int, int], ...] = ((16, 16), (8, 16), (16, 8))
    #: tried besides ``thread_shapes`` where J is narrower than the smallest block those make
    #: (a grouped conv's 4-8 channels a group), so the block is not mostly padding
    narrow_thread_shapes: Tuple[Tuple[int, int], ...] = ((32, 4), (64, 2), (64, 4), (128, 2))
    micro_shapes: Tuple[Tuple[int, int], ...] = (
        (8, 8), (8, 4), (4, 8), (4, 4), (4, 2), (2, 4), (2, 2))
    depth_steps: Tuple[int, ...] = (8, 16, 32)
    max_split_k: int = 16
    min_depth_per_split: int = 128
    step_latency_s: float = 0.3e-6
    load_latency_s: float = 0.01e-6
    prefetch_overhead_s: float = 0.3e-6
    prefetch_overhead_steps: int = 0
    long_step_depth: int = 32
    long_step_slowdown: float = 0.0
    fixed_registers: int = 40
    launch_s: float = 3e-6
    max_attempts: int = 6
    unroll_explicit: bool = False
    vector_widths: Tuple[int, ...] = (1, 4)
    async_copy: bool = False
    # the multi-stage and dynamic-shared-memory forms are opt-in: the sweep has them mixed (a loss
    # where the model then picks a narrower tile) and they cost up to 7x stock compile time
    async_stages: Tuple[int, ...] = (2,)
    unroll_async_depth: bool = True
    dynamic_shared_memory: bool = False
    async_micro_shapes: Tuple[Tuple[int, int], ...] = ()
    min_resident_blocks: int = 2
    wide_micro_shapes: Tuple[Tuple[int, int], ...] = ()
    warp_slow_lanes: Tuple[int, ...] = ()
    stage_epilogue_operands: bool = False
    one_barrier_steps: bool = False
