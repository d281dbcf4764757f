"""Occupancy: how many warps (wavefronts) of a kernel an SM (CU) keeps resident.

Each vendor publishes its own method, and this module follows each one exactly:

NVIDIA
    The CUDA Occupancy Calculator as the CUDA Toolkit ships it in ``include/cuda_occupancy.h``
    (checked against CUDA 13.0's header, ``__CUDA_OCC_MAJOR__`` 12.1):
    ``cudaOccMaxActiveBlocksPerMultiprocessor`` with the function attributes a
    ``cudaFuncAttributes`` converts to (opt-in shared memory, one block barrier) and the default
    device state (no carveout preference). Resident blocks are the least of

    * warps: ``maxWarpsPerSm // ceil(threads / warpSize)`` (``cudaOccMaxBlocksPerSMWarpsLimit``);
    * registers (``cudaOccMaxBlocksPerSMRegsLimit``): a warp is allocated
      ``roundUp(regs * warpSize, 256)`` registers; the register file is split over 4
      sub-partitions and a warp lives in one, so ``warpsPerSm = 4 * ((regsPerSm / 4) //
      regsPerWarp)``; a block that would not fit ``regsPerBlock`` (checked with its warps rounded
      up to a multiple of 4, as the hardware does) or that uses more than 256 registers per
      thread gets 0;
    * block slots: ``cudaOccMaxBlocksPerMultiprocessor``;
    * shared memory (``cudaOccMaxBlocksPerSMSmemLimit``): a block is allocated
      ``roundUp(smem + reservedSharedMemPerBlock, 128)`` bytes (the 1 KB per-block reservation
      of cc 8.0+ is the profile's ``shared_memory_reserved_bytes_per_block``); it gets 0 above the
      opt-in limit plus the reservation (``cudaOccSMemPerBlock``). The header always counts this
      limit: with no shared memory a block still takes its 1 KB reservation.

AMD (CDNA2/CDNA3, gfx90a/gfx942)
    The HIP runtime's ``hipOccupancyMaxActiveBlocksPerMultiprocessor`` (ROCm ``clr``,
    ``hipamd/src/hip_platform.cpp``, ``ihipOccupancyMaxActiveBlocksPerMultiprocessor``), which
    agrees with LLVM's model (``AMDGPUBaseInfo.cpp``: ``getNumWavesPerEUWithNumVGPRs``,
    ``getMaxWavesPerEU``, ``getMaxWorkGroupsPerCU``; ``AMDGPUSubtarget.cpp``:
    ``getOccupancyWithWorkGroupSizes``):

    * waves per SIMD from VGPRs: ``min(8, 512 // alignTo(vgprs, 8))`` (unified arch + acc VGPRs,
      the code object's ``.vgpr_count``); from SGPRs: ``800 // alignTo(sgprs, 16)``;
    * waves per CU: ``4 SIMDs * min(8, those)``; the waves of a work-group are spread over the
      SIMDs, so a CU holds ``wavesPerCu // ceil(threads / 64)`` work-groups;
    * LDS: ``65536 // lds`` work-groups (no allocation granule, no reservation: neither the HIP
      runtime nor LLVM applies one; LLVM marks the granule as a FIXME);
    * work-group slots: ``getMaxWorkGroupsPerCU``: 32 single-wave groups, else
      ``min(32 // waves, 16 barriers)``. It never binds below the wave limit on gfx9 (32 wave
      slots), which is why the HIP runtime can leave it out.

Every per-device figure comes from the :class:`HardwareProfile` (warp size, threads, blocks,
registers and shared memory per SM/CU, reservation, opt-in limit, allocation granularity). The
few constants a profile has no field for are per-architecture tables below, keyed by the
profile's ``target["arch"]`` (``sm_XY``) or ``target["mcpu"]`` (``gfxNNN``), each citing its source.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Dict, Mapping, Tuple

from tvm_fusion_hw.errors import FusionHWError

from .profile import HardwareProfile

# ---- NVIDIA: constants of cuda_occupancy.h (CUDA 13.0), by compute capability major --------------
#: ``cudaOccRegAllocationGranularity``: registers are allocated to a warp in units of 256 (cc 3-12).
CUDA_REG_ALLOCATION_UNIT_PER_WARP = 256
#: ``cudaOccRegAllocationMaxPerThread``: 255 on cc 3/5/6, 256 on cc 7-12 (ptxas never exceeds 255).
CUDA_REG_ALLOCATION_MAX_PER_THREAD = {3: 255, 5: 255, 6: 255, 7: 256, 8: 256, 9: 256, 10: 256, 11: 256, 12: 256}
#: ``cudaOccSubPartitionsPerMultiprocessor``: 4 register-file sub-partitions (cc 6.0 has 2).
CUDA_SUB_PARTITIONS = {3: 4, 5: 4, 7: 4, 8: 4, 9: 4, 10: 4, 11: 4, 12: 4}
#: ``cudaOccSMemAllocationGranularity``: 256 B on cc 3-7, 128 B on cc 8-12.
CUDA_SMEM_ALLOCATION_GRANULARITY = {3: 256, 5: 256, 6: 256, 7: 256, 8: 128, 9: 128, 10: 128, 11: 128, 12: 128}
#: ``cudaDeviceProp::regsPerBlock`` (the header's hardware/software per-block check): 64K 32-bit
#: registers per block on every cc >= 5.0 (CUDA C++ Programming Guide, Compute Capabilities table).
CUDA_REGS_PER_BLOCK = 65536
#: ``cudaOccMaxBlocksPerMultiprocessor``, by (major, minor); a ``None`` minor is the major's default.
#: Used to check the profile's ``max_blocks_per_multiprocessor``.
CUDA_MAX_BLOCKS_PER_SM = {
    (7, None): 32, (7, 5): 16,
    (8, None): 16, (8, 0): 32, (8, 9): 24,
    (9, None): 32,
    (10, None): 32, (10, 1): 24,
    (11, None): 32, (11, 0): 24,
    (12, None): 24,
}

# ---- AMD: constants the HIP runtime and LLVM use for gfx9 (CDNA) ---------------------------------
#: SIMDs (LLVM "EUs") per CU: ``AMDGPUBaseInfo.cpp getEUsPerCU`` = 4 before gfx10; HIP ``simdPerCU``.
AMD_SIMDS_PER_CU = {"gfx90a": 4, "gfx942": 4}
#: SGPRs per SIMD: ``getTotalNumSGPRs`` = 800 for gfx8/gfx9; HIP ``sgprsPerSimd_`` (800 on gfx9).
AMD_SGPRS_PER_SIMD = {"gfx90a": 800, "gfx942": 800}
#: SGPR allocation granule: ``getSGPRAllocGranule`` = 16 for gfx8/gfx9; HIP ``alignUp(usedSGPRs, 16)``.
AMD_SGPR_ALLOCATION_GRANULE = 16
#: Barrier resources per CU: ``getMaxWorkGroupsPerCU`` MaxBarriers = 16 (pre-gfx10 / CU mode).
AMD_BARRIERS_PER_CU = 16

#: Limiter names, in the order a tie is reported (``Occupancy.limiter`` is the first of ``limiters``).
LIMITERS = ("block size", "threads", "block slots", "registers", "scalar registers", "shared memory")


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM/CU, and what limits them."""

    blocks_per_multiprocessor: int
    warps_per_multiprocessor: int
    occupancy: float  # resident warps / the most warps an SM/CU holds
    limiter: str  # "registers", "shared memory", "threads", "block slots", ... (see LIMITERS)
    #: every resource whose bound equals the resident blocks (the header's ``limitingFactors``)
    limiters: Tuple[str, ...] = ()
    #: resident blocks each resource alone allows (``None``: that resource does not limit)
    limits: Mapping[str, object] = dataclasses.field(default_factory=dict, compare=False, hash=False)
    #: registers allocated to one block (NVIDIA: per warp rounded to 256; AMD: per wave, VGPRs x 64)
    allocated_registers_per_block: int = 0
    #: shared memory (LDS) allocated to one block, reservation and granularity included
    allocated_shared_bytes_per_block: int = 0
    #: which published method computed it
    method: str = ""

    def __str__(self) -> str:
        return f"{self.occupancy:.0%} ({self.warps_per_multiprocessor} warps, limited by {self.limiter})"


def round_up(value: int, granularity: int) -> int:
    return int(math.ceil(value / granularity) * granularity)


# ---- architecture lookup ----------------------------------------------------------------------
def cuda_compute_capability(profile: HardwareProfile) -> Tuple[int, int]:
    """``(major, minor)`` from the profile's ``target["arch"]`` (``sm_90``, ``sm_90a``, ``sm_100f``)."""
    arch = str(profile.target.get("arch", ""))
    match = re.fullmatch(r"sm_(\d+?)(\d)[a-z]?", arch)
    if not match:
        raise FusionHWError(f"profile '{profile.name}': cannot read a compute capability from arch '{arch}'")
    major, minor = int(match.group(1)), int(match.group(2))
    if major not in CUDA_SUB_PARTITIONS:
        raise FusionHWError(
            f"profile '{profile.name}': compute capability {major}.{minor} is not in cuda_occupancy.h's tables"
        )
    return major, minor


def cuda_max_blocks_per_sm(major: int, minor: int) -> int:
    """``cudaOccMaxBlocksPerMultiprocessor`` of cuda_occupancy.h."""
    return CUDA_MAX_BLOCKS_PER_SM.get((major, minor), CUDA_MAX_BLOCKS_PER_SM.get((major, None), 32))


def _amd_arch(profile: HardwareProfile) -> str:
    mcpu = str(profile.target.get("mcpu", "")).split(":")[0]
    if mcpu not in AMD_SIMDS_PER_CU:
        raise FusionHWError(
            f"profile '{profile.name}': no occupancy tables for '{mcpu}' (known: {sorted(AMD_SIMDS_PER_CU)})"
        )
    return mcpu


def _result(profile: HardwareProfile, limits: Dict[str, object], warps_per_block: int,
            regs_per_block: int, smem_per_block: int, method: str) -> Occupancy:
    bounded = {k: v for k, v in limits.items() if v is not None}
    blocks = max(min(bounded.values()), 0)
    tied = tuple(k for k in LIMITERS if bounded.get(k) == blocks)
    warps = blocks * warps_per_block
    return Occupancy(
        blocks_per_multiprocessor=blocks,
        warps_per_multiprocessor=warps,
        occupancy=warps / profile.max_warps_per_multiprocessor,
        limiter=tied[0],
        limiters=tied,
        limits=dict(limits),
        allocated_registers_per_block=regs_per_block,
        allocated_shared_bytes_per_block=smem_per_block,
        method=method,
    )


# ---- NVIDIA -----------------------------------------------------------------------------------
def _nvidia_register_limited_warps(profile: HardwareProfile, registers_per_thread: int) -> int:
    """Warps per SM the register file holds (sub-partition rounding), before block quantization."""
    major, _ = cuda_compute_capability(profile)
    partitions = CUDA_SUB_PARTITIONS[major]
    per_warp = round_up(registers_per_thread * profile.warp_size, CUDA_REG_ALLOCATION_UNIT_PER_WARP)
    if per_warp == 0:
        return profile.max_warps_per_multiprocessor
    return partitions * ((profile.registers_per_multiprocessor // partitions) // per_warp)


def _nvidia(profile: HardwareProfile, threads: int, regs: int, smem: int) -> Occupancy:
    major, _ = cuda_compute_capability(profile)
    warps_per_block = math.ceil(threads / profile.warp_size)
    limits: Dict[str, object] = {}
    # Block size: a launch larger than maxThreadsPerBlock gets no block (WarpsLimit).
    limits["block size"] = 0 if threads > profile.max_threads_per_block else None
    # Warps (cudaOccMaxBlocksPerSMWarpsLimit); partitioned global caching is off on cc >= 7.
    limits["threads"] = profile.max_warps_per_multiprocessor // warps_per_block
    # Block slots (cudaOccMaxBlocksPerMultiprocessor); the profile carries the same figure.
    limits["block slots"] = profile.max_blocks_per_multiprocessor
    # Registers (cudaOccMaxBlocksPerSMRegsLimit).
    partitions = CUDA_SUB_PARTITIONS[major]
    regs_per_warp = round_up(regs * profile.warp_size, CUDA_REG_ALLOCATION_UNIT_PER_WARP)
    regs_per_block = regs_per_warp * warps_per_block
    regs_assumed = regs_per_warp * round_up(warps_per_block, partitions)  # the hardware's check
    if (regs_assumed > CUDA_REGS_PER_BLOCK or regs_per_block > CUDA_REGS_PER_BLOCK
            or regs > CUDA_REG_ALLOCATION_MAX_PER_THREAD[major]):
        limits["registers"] = 0
    elif regs_per_warp > 0:
        limits["registers"] = _nvidia_register_limited_warps(profile, regs) // warps_per_block
    else:
        limits["registers"] = None  # INT_MAX in the header
    # Shared memory (cudaOccMaxBlocksPerSMSmemLimit with FUNC_SHMEM_LIMIT_OPTIN, the whole
    # amount dynamic and opted in; with the default carveout the per-SM figure is the profile's).
    reserved = profile.shared_memory_reserved_bytes_per_block
    smem_alloc = round_up(smem + reserved, CUDA_SMEM_ALLOCATION_GRANULARITY[major])
    # cudaOccSMemPerBlock (opt-in): "Starting Ampere, CUDA driver reserves additional shared memory per block"
    smem_limit = profile.shared_memory_bytes_per_block + (reserved if major >= 8 else 0)
    if smem_alloc > smem_limit:
        limits["shared memory"] = 0
    elif smem_alloc > 0:
        limits["shared memory"] = profile.shared_memory_bytes_per_multiprocessor // smem_alloc
    else:
        limits["shared memory"] = None
    # Barriers (cc >= 9, one barrier per block): 2 x block slots, so never the limiter. Virtual
    # resources (cc >= 10) are not used by TVM kernels. Neither is modelled.
    return _result(profile, limits, warps_per_block, regs_per_block, smem_alloc, "cuda_occupancy.h")


# ---- AMD --------------------------------------------------------------------------------------
def _amd_layout(profile: HardwareProfile) -> Tuple[int, int, int]:
    """``(SIMDs per CU, VGPRs per SIMD lane, max waves per SIMD)`` from the profile."""
    simds = AMD_SIMDS_PER_CU[_amd_arch(profile)]
    vgprs = profile.registers_per_multiprocessor // (simds * profile.warp_size)  # 512 on gfx90a/942
    waves = profile.max_warps_per_multiprocessor // simds  # 8: "limited by SPI 32 per CU"
    return simds, vgprs, waves


def _amd_register_limited_waves(profile: HardwareProfile, vgprs: int, sgprs: int = 0) -> int:
    """Waves per CU the VGPR/SGPR files hold (HIP: ``simdPerCU * min(MaxWavesPerSimd, GprWaves)``)."""
    simds, vgprs_per_simd, max_waves = _amd_layout(profile)
    waves = max_waves
    if vgprs > 0:
        waves = min(waves, vgprs_per_simd // round_up(vgprs, profile.register_allocation_granularity))
    if sgprs > 0:
        per_simd = AMD_SGPRS_PER_SIMD[_amd_arch(profile)]
        waves = min(waves, per_simd // round_up(sgprs, AMD_SGPR_ALLOCATION_GRANULE))
    return simds * waves


def _amd(profile: HardwareProfile, threads: int, vgprs: int, lds: int, sgprs: int) -> Occupancy:
    waves_per_block = math.ceil(threads / profile.warp_size)
    limits: Dict[str, object] = {}
    limits["block size"] = 0 if threads > profile.max_threads_per_block else None
    # Wave slots: 8 per SIMD x 4 SIMDs (getMaxWavesPerEU x getEUsPerCU).
    limits["threads"] = profile.max_warps_per_multiprocessor // waves_per_block
    # Work-group slots (getMaxWorkGroupsPerCU): barriers bound multi-wave groups.
    limits["block slots"] = profile.max_blocks_per_multiprocessor if waves_per_block == 1 else min(
        profile.max_warps_per_multiprocessor // waves_per_block, AMD_BARRIERS_PER_CU)
    # VGPRs and SGPRs (getNumWavesPerEUWithNumVGPRs / HIP VgprWaves, SgprWaves).
    if vgprs > profile.max_registers_per_thread:
        limits["registers"] = 0
    elif vgprs > 0:
        limits["registers"] = _amd_register_limited_waves(profile, vgprs) // waves_per_block
    else:
        limits["registers"] = None
    if sgprs > 0:
        limits["scalar registers"] = _amd_register_limited_waves(profile, 0, sgprs) // waves_per_block
    # LDS (HIP lds_occupancy_wgs = localMemSize / usedLDS; LLVM MaxWGsLDS the same).
    if lds > profile.shared_memory_bytes_per_block:
        limits["shared memory"] = 0
    elif lds > 0:
        limits["shared memory"] = profile.shared_memory_bytes_per_multiprocessor // lds
    else:
        limits["shared memory"] = None
    regs_per_block = round_up(max(vgprs, 0), profile.register_allocation_granularity) * profile.warp_size \
        * waves_per_block
    return _result(profile, limits, waves_per_block, regs_per_block, lds, "hip-runtime/llvm-amdgpu")


# ---- public API -------------------------------------------------------------------------------
def occupancy(
    profile: HardwareProfile,
    threads_per_block: int,
    registers_per_thread: int,
    shared_bytes_per_block: int = 0,
    *,
    scalar_registers: int = 0,
) -> Occupancy:
    """Occupancy of a kernel with these resources on ``profile``, by the vendor's method.

    Parameters
    ----------
    profile : HardwareProfile
        The GPU.
    threads_per_block : int
        Threads (work-items) per block (work-group).
    registers_per_thread : int
        Registers per thread as the compiler reports them: ptxas ``Used N registers``, or the
        AMDGPU code object's ``.vgpr_count`` (arch + accumulation VGPRs).
    shared_bytes_per_block : int
        Static plus dynamic shared memory (LDS) per block, bytes, without the system reservation.
    scalar_registers : int
        AMD only: SGPRs per wave (``.sgpr_count``); 0 leaves them out.
    """
    if threads_per_block < 1:
        raise FusionHWError(f"threads_per_block must be positive, got {threads_per_block}")
    if registers_per_thread < 0 or shared_bytes_per_block < 0:
        raise FusionHWError("registers and shared memory must not be negative")
    if profile.vendor == "nvidia":
        return _nvidia(profile, threads_per_block, registers_per_thread, shared_bytes_per_block)
    return _amd(profile, threads_per_block, registers_per_thread, shared_bytes_per_block, scalar_registers)


def register_limited_warps(profile: HardwareProfile, registers_per_thread: int) -> int:
    """Warps (wavefronts) per SM/CU the register file holds at this register count.

    Blocks are not quantized here (as for blocks whose warp count divides this figure).
    """
    if profile.vendor == "nvidia":
        warps = _nvidia_register_limited_warps(profile, registers_per_thread)
    else:
        warps = _amd_register_limited_waves(profile, registers_per_thread)
    return min(warps, profile.max_warps_per_multiprocessor)


def register_budget(profile: HardwareProfile, target_occupancy: float) -> int:
    """Most registers per thread that still let ``target_occupancy`` of the warps be resident.

    Exact for the vendor's allocation rules (NVIDIA: 256-register warp units in 4 sub-partitions;
    AMD: 8-VGPR granules per SIMD), for blocks that divide the resident warps evenly. The result is
    at most the profile's ``max_registers_per_thread`` and at least the allocation granularity.
    """
    needed = math.ceil(target_occupancy * profile.max_warps_per_multiprocessor - 1e-9)
    granule = profile.register_allocation_granularity
    for regs in range(profile.max_registers_per_thread, granule, -1):
        if register_limited_warps(profile, regs) >= needed:
            return regs
    return granule
