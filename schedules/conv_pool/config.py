"""ConvPool's tile-search bounds, beside its tile model (:mod:`.tiles`): the hardware figures come
from the target, not from here."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ConvPoolConfig:  # pylint: disable=too-many-instance-attributes
    """Tile-search bounds; the hardware figures come from the target, not from here.

    Attributes
    ----------
    min_threads, max_threads : int
        Threads per block (a multiple of the warp).
    max_accumulators : int
        Conv outputs a thread keeps in registers (``CV x K*PHV x K'*PWV``); 64 keeps ptxas
        below 128 registers with 3x3 kernels on sm_90.
    max_channels_per_thread : int
        Upper bound on ``CV``.
    max_chunk : int
        Upper bound on ``RC`` (input channels per staging pass).
    max_unrolled_fma, max_unroll : int
        FMAs and input channels in one unrolled step of the inner channel loop (instruction
        cache). Four channels already vectorise the weight loads of a 3x3 kernel; with eight,
        ptxas (sm_80 and sm_90) needed 96 registers for a 32-accumulator tile, squeezed it
        into 80 and spilled, where four gave 102-109 registers and no spill. On the H200
        (bench/results/2026-11-30-h200-stop10) conv_relu_pool at batch 32 ran 5% slower with
        its 64-accumulator tile unrolled by four (2304 FMAs a step: 0.710 against 0.678 ms)
        and compiled in 3.4x stock's time; 576 (batch 1's tile) measured well.
    max_registers : int
        Estimated registers per thread allowed. Seen with nvcc 13 on sm_90: given
        ``__launch_bounds__(256)`` ptxas squeezes a kernel that needs 96 or 168 registers into
        80 or 128 (for one more resident block) and spills; at 128 or below (the estimate is
        within 2 for the 64-accumulator tiles near it) ptxas leaves it alone.
    max_kernel, max_stride, max_window : int
        Largest conv kernel side, conv stride and pool window handled.
    max_attempts : int
        Ranked tiles tried before giving up, when TVM compacts a shared buffer to more than
        planned (an edge-tile guard it cannot see through).
    shortlist : int
        Shapes whose every chunk is costed, after all shapes were costed at their largest
        chunk (the full product is ~30k evaluations, most of a compile's time).
    """

    min_threads: int = 64
    max_threads: int = 256
    max_accumulators: int = 64
    max_channels_per_thread: int = 8
    max_chunk: int = 32
    max_unrolled_fma: int = 1024
    max_unroll: int = 4
    max_registers: int = 128
    max_kernel: int = 7
    max_stride: int = 2
    max_window: int = 4
    max_attempts: int = 8
    shortlist: int = 64
