"""Tests for tvm_fusion_hw.hardware.occupancy against the vendors' published methods.

NVIDIA: ``tests/data/occupancy_cuda_occupancy_h.json`` holds the answers of the CUDA Toolkit's own
calculator, ``cudaOccMaxActiveBlocksPerMultiprocessor`` in ``cuda_occupancy.h``, for a grid of
(threads, registers, shared memory) on every shipped NVIDIA profile. It was made by compiling
:data:`GENERATOR` (below) with g++ against the header; ``python tests/test_occupancy.py`` makes it
again. The Python model must agree with it on every point, and where the header is installed a
test rebuilds the table and checks the stored one is still what the header says.

``tests/data/occupancy_h200_driver.json`` holds what the CUDA driver itself answered on a real
H200 (``cuOccupancyMaxActiveBlocksPerMultiprocessor``, 3080 points for 28 compiled kernels of 24 to
255 registers); the model must agree with it too.

AMD: hand-computed cases from the HIP runtime's ``ihipOccupancyMaxActiveBlocksPerMultiprocessor``
(ROCm clr, hipamd/src/hip_platform.cpp) and LLVM's AMDGPUBaseInfo.cpp
(``getNumWavesPerEUWithNumVGPRs``: ``min(MaxWaves, TotalNumVGPRs / alignTo(NumVGPRs, Granule))``
with MaxWaves 8, TotalNumVGPRs 512, Granule 8 on gfx90a/gfx942; ``getMaxWorkGroupsPerCU``).
"""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tvm_fusion_hw as hw
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.occupancy import (CUDA_REGS_PER_BLOCK, Occupancy, cuda_compute_capability, cuda_max_blocks_per_sm, occupancy, register_budget, register_limited_warps)

DATA = Path(__file__).resolve().parent / "data" / "occupancy_cuda_occupancy_h.json"
#: The CUDA driver's own answers on a real H200 (cuOccupancyMaxActiveBlocksPerMultiprocessor), for
#: NVRTC-compiled kernels of 24-255 registers, with and without static shared memory.
DRIVER_DATA = Path(__file__).resolve().parent / "data" / "occupancy_h200_driver.json"
HEADER_CANDIDATES = ("/usr/local/cuda/include/cuda_occupancy.h",)
NVIDIA = [p for p in hw.known_profiles() if hw.load_profile(p).vendor == "nvidia"]
AMD = [p for p in hw.known_profiles() if hw.load_profile(p).vendor == "amd"]

#: The grid the table covers (threads-major, then registers, then shared bytes).
GRID = {
    "threads": [32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1056],
    "registers": [0, 16, 24, 32, 33, 40, 48, 56, 64, 72, 80, 96, 128, 168, 255, 256],
    # 55296 and 57856 are where the 1 KB reservation costs a block on sm_80 / sm_90; the last
    # three are the opt-in limits (99, 163, 227 KB) and one byte over the largest.
    "shared_bytes": [0, 1, 8192, 49152, 55296, 57856, 101376, 166912, 232448, 232449],
}
#: cudaOccLimitingFactor bits, and the limiter names of tvm_fusion_hw.hardware.occupancy they stand for.
LIMIT_BITS = {"threads": 0x01, "block size": 0x01, "registers": 0x02, "shared memory": 0x04, "block slots": 0x08}

#: The C++ program that asks cuda_occupancy.h. Function attributes as a cudaFuncAttributes converts
#: to (opt-in shared memory limit, one block barrier); all shared memory dynamic and opted in
#: (maxDynamicSharedSizeBytes = the launch's bytes, as TVM's CUDA runtime sets it); default state.
GENERATOR = r"""
#include <cstdio>
#include <cstdlib>
#include <climits>
#include "cuda_occupancy.h"
int main(int argc, char** argv) {
  // argv: major minor maxThreadsPerBlock maxThreadsPerSM regsPerBlock regsPerSM warpSize
  //       sharedMemPerBlock sharedMemPerSM numSms sharedMemPerBlockOptin reservedSharedMemPerBlock
  //       then the grid on stdin: nT T... nR R... nS S...
  cudaOccDeviceProp prop;
  prop.computeMajor = atoi(argv[1]); prop.computeMinor = atoi(argv[2]);
  prop.maxThreadsPerBlock = atoi(argv[3]); prop.maxThreadsPerMultiprocessor = atoi(argv[4]);
  prop.regsPerBlock = atoi(argv[5]); prop.regsPerMultiprocessor = atoi(argv[6]);
  prop.warpSize = atoi(argv[7]); prop.sharedMemPerBlock = atol(argv[8]);
  prop.sharedMemPerMultiprocessor = atol(argv[9]); prop.numSms = atoi(argv[10]);
  prop.sharedMemPerBlockOptin = atol(argv[11]); prop.reservedSharedMemPerBlock = atol(argv[12]);
  int n[3]; long v[3][64];
  for (int a = 0; a < 3; ++a) { if (scanf("%d", &n[a]) != 1) return 2;
    for (int i = 0; i < n[a]; ++i) if (scanf("%ld", &v[a][i]) != 1) return 2; }
  for (int t = 0; t < n[0]; ++t) for (int r = 0; r < n[1]; ++r) for (int s = 0; s < n[2]; ++s) {
    cudaOccFuncAttributes attr;
    attr.maxThreadsPerBlock = 1024; attr.numRegs = (int)v[1][r]; attr.sharedSizeBytes = 0;
    attr.partitionedGCConfig = PARTITIONED_GC_OFF; attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    attr.maxDynamicSharedSizeBytes = (size_t)v[2][s]; attr.numBlockBarriers = 1;
    attr.virtualResourceCount = 0;
    cudaOccDeviceState state; cudaOccResult res;
    cudaOccError err = cudaOccMaxActiveBlocksPerMultiprocessor(&res, &prop, &attr, &state,
                                                               (int)v[0][t], (size_t)v[2][s]);
    if (err != CUDA_OCC_SUCCESS) printf("%ld %ld %ld err %d\n", v[0][t], v[1][r], v[2][s], (int)err);
    else printf("%ld %ld %ld %d %u\n", v[0][t], v[1][r], v[2][s], res.activeBlocksPerMultiprocessor,
                res.limitingFactors);
  }
  return 0;
}
"""


def _header():
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    cands = ([os.path.join(cuda_home, "include", "cuda_occupancy.h")] if cuda_home else []) + list(
        HEADER_CANDIDATES)
    return next((c for c in cands if os.path.isfile(c)), None)


def device_prop(profile):
    """The cudaOccDeviceProp a cudaDeviceProp of this GPU would give (figures from the profile)."""
    major, minor = cuda_compute_capability(profile)
    return {
        "computeMajor": major, "computeMinor": minor,
        "maxThreadsPerBlock": profile.max_threads_per_block,
        "maxThreadsPerMultiprocessor": profile.max_threads_per_multiprocessor,
        "regsPerBlock": CUDA_REGS_PER_BLOCK,
        "regsPerMultiprocessor": profile.registers_per_multiprocessor,
        "warpSize": profile.warp_size,
        "sharedMemPerBlock": 49152,  # the 48 KB default limit of every cc >= 3.0
        "sharedMemPerMultiprocessor": profile.shared_memory_bytes_per_multiprocessor,
        "numSms": profile.multiprocessor_count,
        "sharedMemPerBlockOptin": profile.shared_memory_bytes_per_block,
        "reservedSharedMemPerBlock": profile.shared_memory_reserved_bytes_per_block,
    }


def generate_table(header, workdir):
    """Compile :data:`GENERATOR` against ``header`` and ask it about every NVIDIA profile."""
    src, exe = Path(workdir) / "occ.cpp", Path(workdir) / "occ"
    src.write_text(GENERATOR)
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    subprocess.run([cxx, "-O1", "-std=c++11", "-I", os.path.dirname(header), str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True, timeout=120)
    stdin = " ".join(f"{len(GRID[k])} " + " ".join(map(str, GRID[k]))
                     for k in ("threads", "registers", "shared_bytes"))
    profiles = {}
    for name in NVIDIA:
        prop = device_prop(hw.load_profile(name))
        out = subprocess.run([str(exe), *map(str, prop.values())], input=stdin, check=True,
                             capture_output=True, text=True, timeout=60).stdout.split("\n")
        rows = [line.split() for line in out if line.strip()]
        assert all(r[3] != "err" for r in rows), [r for r in rows if r[3] == "err"][:3]
        profiles[name] = {
            "device_prop": prop,
            "active_blocks": [int(r[3]) for r in rows],
            "limiting_factors": [int(r[4]) for r in rows],
        }
    text = Path(header).read_bytes()
    version = [line.split()[-1] for line in text.decode().splitlines()
               if line.startswith(("#define __CUDA_OCC_MAJOR__", "#define __CUDA_OCC_MINOR__"))]
    return {
        "produced_by": {
            "what": "cudaOccMaxActiveBlocksPerMultiprocessor of the CUDA Toolkit's cuda_occupancy.h, "
                    "asked by the C++ program GENERATOR in tests/test_occupancy.py",
            "header": header,
            "toolkit": os.path.realpath(os.path.join(os.path.dirname(header), os.pardir)),
            "header_occ_version": ".".join(version),
            "header_sha256": hashlib.sha256(text).hexdigest(),
            "command": "python tests/test_occupancy.py  (g++ -std=c++11 -I <cuda>/include occ.cpp)",
            "function_attributes": "numRegs = registers, sharedSizeBytes = 0, dynamicSmemSize = "
                                   "maxDynamicSharedSizeBytes = shared_bytes, FUNC_SHMEM_LIMIT_OPTIN, "
                                   "PARTITIONED_GC_OFF, numBlockBarriers = 1, default device state",
            "limiting_factors": "cudaOccLimitingFactor bits: 1 warps, 2 registers, 4 shared memory, "
                                "8 blocks, 16 barriers",
        },
        "grid": GRID,
        "order": "threads-major, then registers, then shared_bytes",
        "profiles": profiles,
    }


def dump_table(table):
    """JSON text with each list of numbers on one line (the file stays small and diffable)."""
    flat = {}

    def mark(obj):
        if isinstance(obj, dict):
            return {k: mark(v) for k, v in obj.items()}
        if isinstance(obj, list) and all(isinstance(x, int) for x in obj):
            flat[f"@{len(flat)}@"] = json.dumps(obj, separators=(",", ":"))
            return f"@{len(flat) - 1}@"
        if isinstance(obj, list):
            return [mark(x) for x in obj]
        return obj

    text = json.dumps(mark(table), indent=1)
    for key, value in flat.items():
        text = text.replace(f'"{key}"', value)
    return text + "\n"


def _points():
    for t in GRID["threads"]:
        for r in GRID["registers"]:
            for s in GRID["shared_bytes"]:
                yield t, r, s


@pytest.fixture(scope="module")
def table():
    return json.loads(DATA.read_text())


# ---- NVIDIA: the header's own answers ---------------------------------------------------------
def test_table_covers_every_nvidia_profile(table):
    assert sorted(table["profiles"]) == sorted(NVIDIA)
    assert table["grid"] == GRID


@pytest.mark.parametrize("name", NVIDIA)
def test_matches_cuda_occupancy_h_exactly(table, name):
    profile = hw.load_profile(name)
    entry = table["profiles"][name]
    assert entry["device_prop"] == device_prop(profile)
    bad = []
    for (t, r, s), blocks, mask in zip(_points(), entry["active_blocks"], entry["limiting_factors"]):
        occ = occupancy(profile, t, r, s)
        ours = 0
        for lim in occ.limiters:
            ours |= LIMIT_BITS[lim]
        if occ.blocks_per_multiprocessor != blocks or ours != mask:
            bad.append(((t, r, s), (blocks, mask), (occ.blocks_per_multiprocessor, ours)))
    assert not bad, f"{len(bad)} points differ from cuda_occupancy.h, first: {bad[:5]}"


def test_stored_table_is_what_the_installed_header_says(tmp_path, table):
    header = _header()
    if header is None or not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        pytest.skip("cuda_occupancy.h or a C++ compiler is missing")
    fresh = generate_table(header, tmp_path)
    if fresh["produced_by"]["header_sha256"] != table["produced_by"]["header_sha256"]:
        pytest.skip("a different cuda_occupancy.h is installed; regenerate with python tests/test_occupancy.py")
    assert fresh["profiles"] == table["profiles"]


def test_matches_the_h200_driver():
    """The model against the driver of a real H200 (see the file's produced_by)."""
    data = json.loads(DRIVER_DATA.read_text())
    h200 = hw.load_profile("nvidia-h200")
    attrs = data["produced_by"]["device_attributes"]
    assert attrs["CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"] == h200.shared_memory_bytes_per_multiprocessor
    assert attrs["CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"] == h200.shared_memory_bytes_per_block
    assert attrs["CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK"] == h200.shared_memory_reserved_bytes_per_block
    assert attrs["CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR"] == h200.max_blocks_per_multiprocessor
    assert attrs["CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"] == h200.registers_per_multiprocessor
    assert attrs["CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"] == h200.max_threads_per_multiprocessor
    grid = [(t, d) for t in data["grid"]["threads"] for d in data["grid"]["dynamic_shared_bytes"]]
    bad, points = [], 0
    for kernel in data["kernels"]:
        assert len(kernel["active_blocks"]) == len(grid)
        for (threads, dyn), blocks in zip(grid, kernel["active_blocks"]):
            points += 1
            ours = occupancy(h200, threads, kernel["registers"], kernel["static_shared_bytes"] + dyn)
            if ours.blocks_per_multiprocessor != blocks:
                bad.append((kernel["registers"], kernel["static_shared_bytes"], threads, dyn, blocks,
                            ours.blocks_per_multiprocessor))
    assert points == 3080 and not bad, bad[:5]


@pytest.mark.parametrize("name", NVIDIA)
def test_profile_block_slots_match_the_header_table(name):
    profile = hw.load_profile(name)
    assert profile.max_blocks_per_multiprocessor == cuda_max_blocks_per_sm(*cuda_compute_capability(profile))
    assert profile.register_allocation_granularity * profile.warp_size == 256


# Hand-worked examples (sm_90, H200: 64K registers in 4 sub-partitions of 16384, 64 warps,
# 32 blocks, 228 KB shared memory per SM, 1 KB reserved per block, 128 B granularity).
@pytest.mark.parametrize("threads, regs, smem, blocks, occ, limiter", [
    # 32 regs x 32 lanes = 1024 per warp; 16384 / 1024 = 16 warps per sub-partition = 64 warps;
    # 8 blocks of 8 warps; the warp slots give 64 / 8 = 8 too: 100%, both limit.
    (256, 32, 0, 8, 1.0, "threads"),
    # 64 regs: 2048 per warp, 8 warps per sub-partition, 32 warps: 4 blocks: 50%.
    (256, 64, 0, 4, 0.5, "registers"),
    # 255 regs: 8160 rounds up to 8192 per warp, 2 warps per sub-partition, 8 warps, 2 blocks of 4: 12.5%.
    (128, 255, 0, 2, 0.125, "registers"),
    # 33 regs: 1056 rounds up to 1280; 16384 // 1280 = 12 warps per sub-partition = 48 warps per
    # SM, one 32-warp block: 50% (with 32 regs it would be 2 blocks, 100%).
    (1024, 33, 0, 1, 0.5, "registers"),
    (1024, 32, 0, 2, 1.0, "threads"),
    # 56.5 KB: with the 1 KB reservation 57.5 KB = 58880 B per block, 233472 // 58880 = 3 blocks
    # (without the reservation it would be 4): 24 warps, 37.5%.
    (256, 32, 57856, 3, 0.375, "shared memory"),
    # 227 KB is the opt-in limit: 227 + 1 = 228 KB, one block; one byte more rounds past it: none.
    (256, 32, 232448, 1, 0.125, "shared memory"),
    (256, 32, 232449, 0, 0.0, "shared memory"),
    # 32-thread blocks: 32 block slots hold 32 warps: 50%.
    (32, 16, 0, 32, 0.5, "block slots"),
    # More threads than a block may have.
    (1056, 16, 0, 0, 0.0, "block size"),
])
def test_h200_worked_examples(threads, regs, smem, blocks, occ, limiter):
    o = occupancy(hw.load_profile("nvidia-h200"), threads, regs, smem)
    assert (o.blocks_per_multiprocessor, o.occupancy, o.limiter) == (blocks, occ, limiter)
    assert o.method == "cuda_occupancy.h"


def test_a100_reservation_costs_a_block():
    # sm_80, 164 KB per SM: 54 KB + 1 KB = 56320 B per block, 167936 // 56320 = 2 (3 without it).
    a100 = hw.load_profile("nvidia-a100-80gb")
    assert occupancy(a100, 256, 32, 55296).blocks_per_multiprocessor == 2
    assert occupancy(a100, 256, 32, 55296).allocated_shared_bytes_per_block == 56320


def test_1536_thread_sms():
    # sm_86: 48 warps, 16 block slots: 64-thread blocks stop at 16 blocks = 32 warps (2/3).
    rtx = hw.load_profile("nvidia-rtx-3060")
    o = occupancy(rtx, 64, 16, 0)
    assert (o.blocks_per_multiprocessor, o.warps_per_multiprocessor, o.limiter) == (16, 32, "block slots")
    # 512-thread blocks, 40 regs: 1280 per warp, 12 per sub-partition = 48 warps = 3 blocks: 100%.
    assert occupancy(rtx, 512, 40, 0).occupancy == 1.0


# ---- AMD: HIP runtime / LLVM formula, worked by hand -------------------------------------------
# gfx942 (MI300X) and gfx90a (MI250X): 4 SIMDs per CU, 8 waves per SIMD (32 per CU), 512 VGPRs
# per SIMD lane in granules of 8, 800 SGPRs per SIMD in granules of 16, 64 KiB LDS per CU.
@pytest.mark.parametrize("name", AMD)
@pytest.mark.parametrize("threads, vgprs, lds, sgprs, blocks, waves, limiter", [
    # 32 VGPRs: 512 // 32 = 16 -> min(8, 16) = 8 waves per SIMD, 32 per CU: 8 groups of 4 waves.
    (256, 32, 0, 0, 8, 32, "threads"),
    # 64 VGPRs: 512 // 64 = 8 waves per SIMD: still 100%.
    (256, 64, 0, 0, 8, 32, "threads"),
    # 65 VGPRs round to 72: 512 // 72 = 7 per SIMD, 28 per CU: 7 groups: 87.5%.
    (256, 65, 0, 0, 7, 28, "registers"),
    # 128 VGPRs: 4 per SIMD, 16 per CU: 4 groups of 4 waves, 50%.
    (256, 128, 0, 0, 4, 16, "registers"),
    # 129 VGPRs round to 136: 512 // 136 = 3 per SIMD, 12 per CU: 3 groups, 37.5%.
    (256, 129, 0, 0, 3, 12, "registers"),
    # 512 VGPRs (256 arch + 256 AGPRs): 1 wave per SIMD, 4 per CU: 4 single-wave groups, 12.5%.
    (64, 512, 0, 0, 4, 4, "registers"),
    # 1024 threads = 16 waves: 2 groups fill 32 slots at <= 64 VGPRs; 72 VGPRs (7 per SIMD, 28
    # per CU) leave room for 1 group.
    (1024, 64, 0, 0, 2, 32, "threads"),
    (1024, 72, 0, 0, 1, 16, "registers"),
    # LDS: 64 KiB // 32 KiB = 2 groups; 16385 B -> 65536 // 16385 = 3 groups (no granule).
    (256, 16, 32768, 0, 2, 8, "shared memory"),
    (256, 16, 16385, 0, 3, 12, "shared memory"),
    (256, 16, 65537, 0, 0, 0, "shared memory"),
    # SGPRs: 100 round to 112, 800 // 112 = 7 waves per SIMD, 28 per CU: 7 groups.
    (256, 16, 0, 100, 7, 28, "scalar registers"),
    # Single-wave groups: 32 wave slots, 32 group slots.
    (64, 16, 0, 0, 32, 32, "threads"),
    # 2-wave groups (128 threads): getMaxWorkGroupsPerCU = min(32 // 2, 16 barriers) = 16.
    (128, 16, 0, 0, 16, 32, "threads"),
    # A 65-thread group takes 2 waves.
    (65, 16, 0, 0, 16, 32, "threads"),
    (1088, 16, 0, 0, 0, 0, "block size"),
])
def test_amd_worked_examples(name, threads, vgprs, lds, sgprs, blocks, waves, limiter):
    o = occupancy(hw.load_profile(name), threads, vgprs, lds, scalar_registers=sgprs)
    assert (o.blocks_per_multiprocessor, o.warps_per_multiprocessor, o.limiter) == (blocks, waves, limiter)
    assert o.occupancy == waves / 32


def test_amd_register_waves_match_llvm_formula():
    """getNumWavesPerEUWithNumVGPRs(N, Granule=8, MaxWaves=8, Total=512), for every N."""
    mi300x = hw.load_profile("amd-mi300x")
    for n in range(1, 513):
        llvm = 8 if n < 8 else min(max(512 // (-(-n // 8) * 8), 1), 8)
        assert register_limited_warps(mi300x, n) == 4 * llvm, n


# ---- register budget --------------------------------------------------------------------------
@pytest.mark.parametrize("name, target, budget", [
    ("nvidia-h200", 0.5, 64),       # 32 warps: 8 per sub-partition: 2048 regs per warp
    ("nvidia-h200", 0.25, 128),
    ("nvidia-h200", 1.0, 32),
    ("nvidia-h200", 1 / 64, 255),   # one warp per sub-partition allows 512: capped at 255
    ("nvidia-rtx-3060", 0.5, 80),   # 24 of 48 warps: 6 per sub-partition: 16384 // 6 = 2730 -> 2560
    ("nvidia-rtx-3060", 0.25, 168),
    ("amd-mi300x", 0.5, 128),       # 4 waves per SIMD: 512 // 4
    ("amd-mi300x", 0.25, 256),
    ("amd-mi300x", 1.0, 64),
    ("amd-mi250x", 0.125, 512),
])
def test_register_budget(name, target, budget):
    profile = hw.load_profile(name)
    assert register_budget(profile, target) == budget
    # the budget reaches the target, one granule more does not
    need = target * profile.max_warps_per_multiprocessor
    assert register_limited_warps(profile, budget) >= need - 1e-9
    if budget < profile.max_registers_per_thread:
        assert register_limited_warps(profile, budget + 1) < need


def test_occupancy_api():
    o = occupancy(hw.load_profile("nvidia-h200"), 256, 64)
    assert isinstance(o, Occupancy) and str(o) == "50% (32 warps, limited by registers)"
    assert o.limits["registers"] == 4 and o.allocated_registers_per_block == 2048 * 8
    with pytest.raises(FusionHWError):
        occupancy(hw.load_profile("nvidia-h200"), 0, 32)


def test_unknown_arch_is_an_error():
    odd = dataclasses.replace(hw.load_profile("nvidia-h200"), target={"kind": "cuda", "arch": "sm_20"})
    with pytest.raises(FusionHWError, match="compute capability 2.0"):
        occupancy(odd, 256, 32)


if __name__ == "__main__":
    HEADER = sys.argv[1] if len(sys.argv) > 1 else _header()
    if HEADER is None:
        sys.exit("cuda_occupancy.h not found: pass its path")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        TABLE = generate_table(HEADER, tmp)
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(dump_table(TABLE))
    print(f"wrote {DATA} ({sum(len(p['active_blocks']) for p in TABLE['profiles'].values())} points)")
