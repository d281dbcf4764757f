"""The GPU limits a schedule rule sizes its tiles against.

A rule reads the hardware from the profile the target carries (:func:`tvm_fusion_hw.profile_of`);
a target made without one (a plain ``{"kind": "cuda", "arch": "sm_80"}``) gets a fallback
:class:`~tvm_fusion_hw.hardware.profile.HardwareProfile` built from the target's own attributes
and conservative defaults for what a target cannot say (SM count, resident threads per SM).
Either way the tile models read the hardware from ``limits.profile`` and compute occupancy with
:func:`tvm_fusion_hw.hardware.occupancy.occupancy` (see :func:`tile_occupancy`).
"""

from __future__ import annotations

import dataclasses
import functools

from tvm.target import Target

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.occupancy import AMD_SIMDS_PER_CU, Occupancy, cuda_compute_capability, occupancy
from tvm_fusion_hw.hardware.profile import HardwareProfile
from tvm_fusion_hw.hardware.target import profile_of

#: CUDA caps a block's *static* ``__shared__`` arrays at 48 KiB whatever the opt-in limit is; TVM's
#: ``shared`` scope is allocated statically. Its ``shared.dyn`` scope is one ``extern __shared__``
#: array sized at launch, which may reach the profile's opt-in limit: TVM's CUDA runtime
#: (``cuda_module.cc``, since apache/tvm#11478) sets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``
#: itself on a kernel's first launch when it asks for 48 KiB or more.
CUDA_STATIC_SHARED_MEMORY_BYTES = 48 * 1024

#: Used when a target carries no profile. A mid-size GPU: its grid-fill estimates err towards
#: "enough blocks", which only costs some tail effect on a larger GPU.
_FALLBACK_MULTIPROCESSORS = 80
_FALLBACK_THREADS_PER_MULTIPROCESSOR = 2048
_FALLBACK_BLOCKS_PER_MULTIPROCESSOR = 32
_FALLBACK_REGISTERS_PER_MULTIPROCESSOR = 65536
_FALLBACK_MAX_REGISTERS_PER_THREAD = 255
_FALLBACK_REGISTER_ALLOCATION_GRANULARITY = 8
_FALLBACK_DRAM_BYTES_PER_S = 2.0e12
_FALLBACK_FP32_FLOP_PER_S = 20e12
_FALLBACK_L2_CACHE_BYTES = 4 * 1024 * 1024
#: The architecture the occupancy tables use when the target's own is not in them (TVM's plain
#: ``rocm`` target defaults to gfx900; ``hardware.occupancy``'s tables cover compute capability
#: 3.x, 5.x and 7.x to 12.x, gfx90a and gfx942).
_FALLBACK_CUDA_ARCH = "sm_80"
_FALLBACK_ROCM_MCPU = "gfx90a"


@dataclasses.dataclass(frozen=True)
class GPULimits:
    """What one block and one multiprocessor (SM or CU) may use on the target.

    ``profile`` holds the hardware figures (a fallback profile, named ``<kind>-fallback``, for a
    target without one); the fields here are only what a schedule sees differently from it.
    ``from_profile`` says whether ``profile`` is the target's hardware profile (True) or that
    fallback (False).
    """

    profile: HardwareProfile
    kind: str
    #: what one block may use in TVM's static ``shared`` scope: the profile's opt-in limit, capped
    #: at 48 KiB on CUDA (tiles are sized against this; occupancy reads the profile's figures)
    shared_memory_bytes_per_block: int
    warp_instructions_per_s: float  # instruction issue rate of the whole GPU, in warp instructions
    from_profile: bool
    #: what one block may use in the ``shared.dyn`` scope: the profile's opt-in limit on CUDA; on
    #: ROCm the static figure (the templates do not use TVM's dynamic LDS there)
    dynamic_shared_memory_bytes_per_block: int = 0

    def __hash__(self) -> int:
        # A profile holds dicts (target, sources) and does not hash; its name stands for it (the
        # tile models' caches key on limits; equality still compares the whole profile).
        return hash((self.profile.name, self.kind, self.shared_memory_bytes_per_block,
                     self.warp_instructions_per_s, self.from_profile, self.dynamic_shared_memory_bytes_per_block))

    def shared_limit(self, scope: str = "shared") -> int:
        """Bytes one block may use in ``scope`` (``shared`` or ``shared.dyn``)."""
        if scope == "shared.dyn":
            return max(self.dynamic_shared_memory_bytes_per_block, self.shared_memory_bytes_per_block)
        return self.shared_memory_bytes_per_block

    @property
    def resident_threads(self) -> int:
        """Threads the whole GPU keeps resident at full occupancy."""
        return self.profile.multiprocessor_count * self.profile.max_threads_per_multiprocessor


@functools.lru_cache(maxsize=8192)
def tile_occupancy(limits: GPULimits, threads: int, registers: int, shared_bytes: int) -> Occupancy:
    """Occupancy of a tile (threads per block, registers per thread, shared bytes per block) by
    the vendor's method: :func:`tvm_fusion_hw.hardware.occupancy.occupancy` on ``limits.profile``
    (shared memory per SM from the profile, not the static per-block cap). Its
    ``blocks_per_multiprocessor`` is 0 when the tile does not fit at all. Remembered: a tile
    search asks for the same few figures thousands of times."""
    return occupancy(limits.profile, threads, registers, shared_bytes)


def registers_per_thread_at_occupancy(limits: GPULimits, fraction: float) -> int:
    """The register file shared evenly by ``fraction`` of an SM's most resident threads, rounded
    down to 8 (the allocation unit of NVIDIA and AMD), at most the registers a thread may use.

    A bound for tile searches, not the vendor's allocation rules (for those see
    :func:`tvm_fusion_hw.hardware.occupancy.register_budget`)."""
    profile = limits.profile
    share = int(profile.registers_per_multiprocessor
                / (profile.max_threads_per_multiprocessor * fraction)) // 8 * 8
    return min(profile.max_registers_per_thread, share)


def _attr(target: Target, name: str, default: int) -> int:
    value = target.attrs.get(name, None)
    return int(value) if value is not None else default


def _occupancy_arch(kind: str, target: Target) -> dict:
    """The target's ``arch`` (``mcpu``) where the occupancy tables know it, else the fallback's."""
    if kind == "rocm":
        mcpu = str(target.attrs.get("mcpu", "") or "").split(":")[0]
        return {"kind": kind, "mcpu": mcpu if mcpu in AMD_SIMDS_PER_CU else _FALLBACK_ROCM_MCPU}
    arch = {"kind": kind, "arch": str(target.attrs.get("arch", "") or "")}
    try:
        cuda_compute_capability(dataclasses.replace(_fallback_template(), target=arch))
    except FusionHWError:
        arch["arch"] = _FALLBACK_CUDA_ARCH
    return arch


def _fallback_template() -> HardwareProfile:
    """A placeholder profile (names and figures overwritten by :func:`fallback_profile`)."""
    return HardwareProfile(
        name="fallback", display_name="fallback", vendor="nvidia", memory_type="unknown",
        target={"kind": "cuda", "arch": _FALLBACK_CUDA_ARCH},
        dram_bytes_per_s=_FALLBACK_DRAM_BYTES_PER_S, peak_fp32_flop_per_s=_FALLBACK_FP32_FLOP_PER_S,
        peak_fp16_flop_per_s=_FALLBACK_FP32_FLOP_PER_S, multiprocessor_count=_FALLBACK_MULTIPROCESSORS,
        register_file_bytes_per_multiprocessor=4 * _FALLBACK_REGISTERS_PER_MULTIPROCESSOR,
        max_registers_per_thread=_FALLBACK_MAX_REGISTERS_PER_THREAD,
        register_allocation_granularity=_FALLBACK_REGISTER_ALLOCATION_GRANULARITY,
        shared_memory_bytes_per_multiprocessor=49152, shared_memory_bytes_per_block=49152,
        shared_memory_reserved_bytes_per_block=0, l2_cache_bytes=_FALLBACK_L2_CACHE_BYTES, warp_size=32,
        max_threads_per_block=1024, max_threads_per_multiprocessor=_FALLBACK_THREADS_PER_MULTIPROCESSOR,
        max_blocks_per_multiprocessor=_FALLBACK_BLOCKS_PER_MULTIPROCESSOR, sources={},
    )


def fallback_profile(target: Target) -> HardwareProfile:
    """A :class:`HardwareProfile` for a cuda or rocm target that carries none: what the target's
    attributes say (warp size, threads and shared memory per block, registers), the rest from
    this module's ``_FALLBACK_*`` defaults. Its name (``cuda-fallback``, ``rocm-fallback``) and
    every ``sources`` entry say it is a fallback."""
    kind = target.kind.name
    warp = _attr(target, "thread_warp_size", 64 if kind == "rocm" else 32)
    smem = _attr(target, "max_shared_memory_per_block", 65536 if kind == "rocm" else 49152)
    threads = _attr(target, "max_threads_per_block", _attr(target, "max_num_threads", 1024))
    registers = _attr(target, "registers_per_block", _FALLBACK_REGISTERS_PER_MULTIPROCESSOR)
    values = dataclasses.asdict(_fallback_template())
    values.update(
        name=f"{kind}-fallback",
        display_name=f"{kind} target without a hardware profile (fallback figures)",
        vendor="amd" if kind == "rocm" else "nvidia",
        target=_occupancy_arch(kind, target),
        register_file_bytes_per_multiprocessor=4 * registers,
        shared_memory_bytes_per_multiprocessor=smem,
        shared_memory_bytes_per_block=smem,
        l2_cache_bytes=_attr(target, "l2_cache_size_bytes", _FALLBACK_L2_CACHE_BYTES),
        warp_size=warp,
        max_threads_per_block=threads,
    )
    values["sources"] = {field: "fallback: the target's attributes or tvm_fusion_hw.schedules.base.limits "
                                "_FALLBACK_* defaults, not a hardware profile"
                         for field in values if field not in ("name", "display_name", "sources")}
    return HardwareProfile(**values)


def gpu_limits(target: Target) -> GPULimits:
    """The limits of ``target``: from its hardware profile, else from a fallback profile.

    Parameters
    ----------
    target : tvm.target.Target
        A cuda or rocm target, preferably made by :func:`tvm_fusion_hw.hardware.target`.

    Returns
    -------
    limits : GPULimits
        Shared memory per block is capped at what TVM's static ``shared`` scope may use
        (48 KiB on CUDA); ``dynamic_shared_memory_bytes_per_block`` is the profile's opt-in
        limit on CUDA (``shared.dyn``), the static figure elsewhere.
    """
    kind = target.kind.name
    static_cap = CUDA_STATIC_SHARED_MEMORY_BYTES if kind == "cuda" else 1 << 30
    try:
        profile = profile_of(target)
        from_profile = True
    except FusionHWError:
        profile, from_profile = fallback_profile(target), False
    return GPULimits(
        profile=profile,
        kind=kind,
        shared_memory_bytes_per_block=min(profile.shared_memory_bytes_per_block, static_cap),
        dynamic_shared_memory_bytes_per_block=(profile.shared_memory_bytes_per_block if kind == "cuda"
                                               else min(profile.shared_memory_bytes_per_block, static_cap)),
        # One FP32 FMA (2 FLOP) per lane per issued instruction at peak.
        warp_instructions_per_s=profile.peak_fp32_flop_per_s / (2 * profile.warp_size),
        from_profile=from_profile,
    )
