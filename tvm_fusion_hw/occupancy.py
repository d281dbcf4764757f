"""Occupancy: how many warps (wavefronts) of a kernel an SM (CU) keeps resident.

Resident blocks are bounded by four resources of the profile: registers, shared memory, threads
and the block-slot limit. The smallest bound wins and names the limiter. Registers are rounded up
to the profile's allocation granularity, shared memory adds the per-block reservation. This is
the first-order model of NVIDIA's occupancy calculator; per-vendor allocation details (warp
allocation granularity, AMD's per-SIMD VGPR banks) are refined by the register-feedback issue.
"""

from __future__ import annotations

import dataclasses
import math

from .profile import HardwareProfile


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM/CU, and what limits them."""

    blocks_per_multiprocessor: int
    warps_per_multiprocessor: int
    occupancy: float  # resident warps / the most warps an SM/CU holds
    limiter: str  # "registers", "shared memory", "threads" or "block slots"

    def __str__(self) -> str:
        return f"{self.occupancy:.0%} ({self.warps_per_multiprocessor} warps, limited by {self.limiter})"


def round_up(value: int, granularity: int) -> int:
    return int(math.ceil(value / granularity) * granularity)


def occupancy(
    profile: HardwareProfile,
    threads_per_block: int,
    registers_per_thread: int,
    shared_bytes_per_block: int = 0,
) -> Occupancy:
    """Occupancy of a kernel with these resources on ``profile``."""
    warps_per_block = math.ceil(threads_per_block / profile.warp_size)
    regs = round_up(max(registers_per_thread, 1), profile.register_allocation_granularity)
    regs = min(regs, profile.max_registers_per_thread)
    bounds = {
        "registers": profile.registers_per_multiprocessor // (regs * profile.warp_size * warps_per_block),
        "threads": profile.max_threads_per_multiprocessor // (warps_per_block * profile.warp_size),
        "block slots": profile.max_blocks_per_multiprocessor,
    }
    if shared_bytes_per_block > 0:
        bounds["shared memory"] = profile.shared_memory_bytes_per_multiprocessor // (
            shared_bytes_per_block + profile.shared_memory_reserved_bytes_per_block
        )
    if shared_bytes_per_block > profile.shared_memory_bytes_per_block:
        bounds["shared memory"] = 0
    limiter = min(bounds, key=lambda k: bounds[k])
    blocks = max(bounds[limiter], 0)
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / profile.max_warps_per_multiprocessor, limiter)


def register_budget(profile: HardwareProfile, target_occupancy: float) -> int:
    """Registers per thread that still allow ``target_occupancy`` (rounded down to granularity)."""
    threads = target_occupancy * profile.max_threads_per_multiprocessor
    regs = int(profile.registers_per_multiprocessor / threads)
    regs -= regs % profile.register_allocation_granularity
    return min(regs, profile.max_registers_per_thread)
