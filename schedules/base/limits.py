"""The GPU limits a schedule rule sizes its tiles against.

A rule reads the hardware from the profile the target carries (:func:`tvm_fusion_hw.profile_of`);
a target made without one (a plain ``{"kind": "cuda", "arch": "sm_80"}``) falls back to the
target's own attributes and to conservative defaults for what a target cannot say (SM count,
resident threads per SM).
"""

from __future__ import annotations

import dataclasses

from tvm.target import Target

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.target import profile_of


#: CUDA caps a block's *static* ``__shared__`` arrays at 48 KiB whatever the opt-in limit is; TVM's
#: ``shared`` scope is allocated statically (``shared.dyn`` would need the opt-in attribute).
CUDA_STATIC_SHARED_MEMORY_BYTES = 48 * 1024

#: Used when a target carries no profile. A mid-size GPU: its grid-fill estimates err towards
#: "enough blocks", which only costs some tail effect on a larger GPU.
_FALLBACK_MULTIPROCESSORS = 80
_FALLBACK_THREADS_PER_MULTIPROCESSOR = 2048
_FALLBACK_BLOCKS_PER_MULTIPROCESSOR = 32
_FALLBACK_REGISTERS_PER_MULTIPROCESSOR = 65536
_FALLBACK_MAX_REGISTERS_PER_THREAD = 255
_FALLBACK_DRAM_BYTES_PER_S = 2.0e12
_FALLBACK_FP32_FLOP_PER_S = 20e12


@dataclasses.dataclass(frozen=True)
class GPULimits:  # pylint: disable=too-many-instance-attributes
    """What one block and one multiprocessor (SM or CU) may use on the target.

    ``from_profile`` says whether the figures come from a hardware profile (True) or from the
    target's attributes and defaults (False).
    """

    kind: str
    warp_size: int
    max_threads_per_block: int
    shared_memory_bytes_per_block: int
    shared_memory_bytes_per_multiprocessor: int
    shared_memory_reserved_bytes_per_block: int
    multiprocessor_count: int
    max_threads_per_multiprocessor: int
    max_blocks_per_multiprocessor: int
    registers_per_multiprocessor: int
    max_registers_per_thread: int
    dram_bytes_per_s: float
    warp_instructions_per_s: float  # instruction issue rate of the whole GPU, in warp instructions
    from_profile: bool

    @property
    def resident_threads(self) -> int:
        """Threads the whole GPU keeps resident at full occupancy."""
        return self.multiprocessor_count * self.max_threads_per_multiprocessor


def _attr(target: Target, name: str, default: int) -> int:
    value = target.attrs.get(name, None)
    return int(value) if value is not None else default


def gpu_limits(target: Target) -> GPULimits:
    """The limits of ``target``: from its hardware profile, else from its attributes.

    Parameters
    ----------
    target : tvm.target.Target
        A cuda or rocm target, preferably made by :func:`tvm_fusion_hw.hardware.target`.

    Returns
    -------
    limits : GPULimits
        Shared memory per block is capped at what TVM's static ``shared`` scope may use
        (48 KiB on CUDA).
    """
    kind = target.kind.name
    static_cap = CUDA_STATIC_SHARED_MEMORY_BYTES if kind == "cuda" else 1 << 30
    try:
        profile = profile_of(target)
    except FusionHWError:
        profile = None
    if profile is not None:
        return GPULimits(
            kind=kind,
            warp_size=profile.warp_size,
            max_threads_per_block=profile.max_threads_per_block,
            shared_memory_bytes_per_block=min(profile.shared_memory_bytes_per_block, static_cap),
            shared_memory_bytes_per_multiprocessor=profile.shared_memory_bytes_per_multiprocessor,
            shared_memory_reserved_bytes_per_block=profile.shared_memory_reserved_bytes_per_block,
            multiprocessor_count=profile.multiprocessor_count,
            max_threads_per_multiprocessor=profile.max_threads_per_multiprocessor,
            max_blocks_per_multiprocessor=profile.max_blocks_per_multiprocessor,
            registers_per_multiprocessor=profile.registers_per_multiprocessor,
            max_registers_per_thread=profile.max_registers_per_thread,
            dram_bytes_per_s=profile.dram_bytes_per_s,
            # One FP32 FMA (2 FLOP) per lane per issued instruction at peak.
            warp_instructions_per_s=profile.peak_fp32_flop_per_s / (2 * profile.warp_size),
            from_profile=True,
        )
    warp = _attr(target, "thread_warp_size", 64 if kind == "rocm" else 32)
    smem = _attr(target, "max_shared_memory_per_block", 65536 if kind == "rocm" else 49152)
    threads = _attr(target, "max_threads_per_block", _attr(target, "max_num_threads", 1024))
    return GPULimits(
        kind=kind,
        warp_size=warp,
        max_threads_per_block=threads,
        shared_memory_bytes_per_block=min(smem, static_cap),
        shared_memory_bytes_per_multiprocessor=smem,
        shared_memory_reserved_bytes_per_block=0,
        multiprocessor_count=_FALLBACK_MULTIPROCESSORS,
        max_threads_per_multiprocessor=_FALLBACK_THREADS_PER_MULTIPROCESSOR,
        max_blocks_per_multiprocessor=_FALLBACK_BLOCKS_PER_MULTIPROCESSOR,
        registers_per_multiprocessor=_attr(
            target, "registers_per_block", _FALLBACK_REGISTERS_PER_MULTIPROCESSOR
        ),
        max_registers_per_thread=_FALLBACK_MAX_REGISTERS_PER_THREAD,
        dram_bytes_per_s=_FALLBACK_DRAM_BYTES_PER_S,
        warp_instructions_per_s=_FALLBACK_FP32_FLOP_PER_S / (2 * warp),
        from_profile=False,
    )
