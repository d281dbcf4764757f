"""What the compiler made of each kernel: registers, spills, shared memory, block size.

:func:`measure` reads a built executable (``tvm.compile``'s result) and returns one
:class:`KernelResources` per GPU kernel; :func:`occupancy_of` turns one into an
:class:`~tvm_fusion_hw.hardware.occupancy.Occupancy` on a profile. This is the measuring half of the
register-feedback loop (design.md: "feedback (ptxas / AMDGPU metadata: registers, spills, smem,
occupancy)").

CUDA
    ptxas' ``-v`` report of the kernels, their source compiled again as TVM's loader compiles it
    (NVRTC or nvcc, :mod:`.ptxas`). Threads per block come from the launch, else from
    ``__launch_bounds__(N)``, which TVM's CUDA codegen writes as the product of the kernel's
    thread extents.
ROCm
    The code object's AMDGPU metadata (:mod:`.amdgpu_metadata`); nothing outside TVM is needed.
Launch configuration (both)
    Grid and block extents and the dynamic shared memory size, from the constants the host code
    launches each kernel with (:mod:`.kernel_launches`); ``None`` where they are not constants.

Pitfall seen (TVM 0.27, ROCm built without an AMD GPU): ``codegen_amdgpu`` asks the ROCm device
API for the block-size limit and, without a device, compiles every kernel for at most 256 threads
(``.max_flat_workgroup_size: 256``, "Cannot get maximum number of threads for AMD codegen"),
while the schedules launch up to 1024. :func:`measure` warns when a launch exceeds the bound the
code object was compiled for: such a code object cannot run that launch as built, and its VGPR
count was allocated for the smaller work-group.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from typing import Dict, List, Mapping, Optional, Tuple, Union

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.occupancy import Occupancy, occupancy
from tvm_fusion_hw.hardware.profile import HardwareProfile

from .amdgpu_metadata import parse_amdgpu_metadata
from .kernel_launches import CUDA_KINDS, ROCM_KINDS, Launch, device_modules, launches
from .ptxas import cuda_compiler, nvrtc_report, parse_ptxas, ptxas_report

SOURCES = ("ptxas", "amdgpu-metadata", "estimate")


@dataclasses.dataclass(frozen=True)
class KernelResources:  # pylint: disable=too-many-instance-attributes
    """Resources of one GPU kernel as the compiler allocated them (per thread unless noted)."""

    name: str
    registers: int  # NVIDIA: ptxas "Used N registers"; AMD: .vgpr_count (arch + acc VGPRs)
    spill_store_bytes: int  # NVIDIA: ptxas spill stores; AMD: 4 x .vgpr_spill_count (bytes a lane spills)
    spill_load_bytes: int  # NVIDIA: ptxas spill loads; AMD: as the stores (the metadata counts registers)
    shared_bytes: int  # per block: static + dynamic (dynamic only where the launch is known)
    threads_per_block: Optional[int]  # the launch's block size (None: unknown)
    source: str  # "ptxas" | "amdgpu-metadata" | "estimate"
    stack_frame_bytes: int = 0  # NVIDIA: stack frame (local memory); AMD: .private_segment_fixed_size
    static_shared_bytes: int = 0  # ptxas "bytes smem" / .group_segment_fixed_size
    dynamic_shared_bytes: Optional[int] = 0  # launch argument; None where it is not a constant
    max_threads_per_block: Optional[int] = None  # compiled-for bound: __launch_bounds__ / .max_flat_workgroup_size
    grid_blocks: Optional[int] = None  # blocks launched (product of the blockIdx extents)
    scalar_registers: int = 0  # AMD: .sgpr_count
    accumulation_registers: int = 0  # AMD: .agpr_count (included in registers)
    spilled_registers: int = 0  # AMD: .vgpr_spill_count + .sgpr_spill_count
    barriers: int = 0  # NVIDIA: ptxas "used N barriers"
    arch: str = ""  # sm_90, gfx942, ...
    compiler: str = ""  # what compiled it here: "nvrtc", "nvcc" or "llvm" (TVM's AMDGPU codegen)

    @property
    def spills(self) -> bool:
        """Whether the kernel spills registers (or uses local/scratch memory)."""
        return bool(self.spill_store_bytes or self.spill_load_bytes or self.spilled_registers
                    or self.stack_frame_bytes)


# ---- CUDA: ptxas' report and the kernels' source ----------------------------------------------
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\(\s*(\d+)[^)]*\)\s+(\w+)\s*\(")


def cuda_kernel_names(cuda_source: str) -> List[str]:
    """Names of the ``__global__`` kernels defined or declared in CUDA source, in order, once each."""
    pattern = r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\("
    return list(dict.fromkeys(re.findall(pattern, cuda_source)))


def parse_launch_bounds(cuda_source: str) -> Dict[str, int]:
    """``{kernel: N}`` from ``__launch_bounds__(N) kernel(`` in CUDA source."""
    return {name: int(n) for n, name in _LAUNCH_BOUNDS.findall(cuda_source)}


def measure_cuda_source(cuda_source: str, arch: str, nvcc: Optional[str] = None,
                        launch: Optional[Mapping[str, Launch]] = None,
                        compiler: str = "nvcc") -> List[KernelResources]:
    """:class:`KernelResources` of every ``__global__`` kernel in a CUDA source (through ptxas).

    ``compiler`` is ``"nvcc"`` (``nvcc`` names the binary, else :func:`toolchain.nvcc_path`) or
    ``"nvrtc"`` (TVM's default load path, needs ``cuda-bindings``).
    """
    if compiler == "nvrtc":
        report = parse_ptxas(nvrtc_report(cuda_source, arch))
    else:
        report = parse_ptxas(ptxas_report(cuda_source, arch, nvcc))
    bounds = parse_launch_bounds(cuda_source)
    order = {name: i for i, name in enumerate(cuda_kernel_names(cuda_source))}
    launch = launch or {}
    result = []
    for name, info in sorted(report.items(), key=lambda item: order.get(item[0], len(order))):
        cfg = launch.get(name)
        threads = cfg.threads_per_block if cfg and cfg.threads_per_block else bounds.get(name)
        dyn = cfg.dynamic_shared_bytes if cfg else (None if _uses_dynamic_shared(cuda_source) else 0)
        static = int(info["shared_bytes"])
        result.append(KernelResources(
            name=name, registers=int(info["registers"]),
            spill_store_bytes=int(info["spill_store_bytes"]), spill_load_bytes=int(info["spill_load_bytes"]),
            shared_bytes=static + (dyn or 0), threads_per_block=threads, source="ptxas",
            stack_frame_bytes=int(info["stack_frame_bytes"]), static_shared_bytes=static,
            dynamic_shared_bytes=dyn, max_threads_per_block=bounds.get(name),
            grid_blocks=cfg.grid_blocks if cfg else None, barriers=int(info["barriers"]),
            arch=str(info["arch"]), compiler=compiler,
        ))
    return result


def _uses_dynamic_shared(cuda_source: str) -> bool:
    return re.search(r"extern\s+__shared__", cuda_source) is not None


# ---- ROCm: AMDGPU metadata --------------------------------------------------------------------
def measure_amdgpu_asm(asm: str, launch: Optional[Mapping[str, Launch]] = None) -> List[KernelResources]:
    """:class:`KernelResources` of every kernel in AMDGPU assembly (from its metadata)."""
    launch = launch or {}
    result = []
    for meta in parse_amdgpu_metadata(asm):
        name = str(meta.get("name", ""))
        cfg = launch.get(name)
        static = int(meta.get("group_segment_fixed_size", 0))
        dyn = cfg.dynamic_shared_bytes if cfg else 0
        spilled_v = int(meta.get("vgpr_spill_count", 0))
        result.append(KernelResources(
            name=name, registers=int(meta.get("vgpr_count", 0)),
            spill_store_bytes=4 * spilled_v, spill_load_bytes=4 * spilled_v,
            shared_bytes=static + (dyn or 0),
            threads_per_block=cfg.threads_per_block if cfg else None, source="amdgpu-metadata",
            stack_frame_bytes=int(meta.get("private_segment_fixed_size", 0)),
            static_shared_bytes=static, dynamic_shared_bytes=dyn,
            max_threads_per_block=meta.get("max_flat_workgroup_size"),  # type: ignore[arg-type]
            grid_blocks=cfg.grid_blocks if cfg else None,
            scalar_registers=int(meta.get("sgpr_count", 0)),
            accumulation_registers=int(meta.get("agpr_count", 0)),
            spilled_registers=spilled_v + int(meta.get("sgpr_spill_count", 0)),
            arch=str(meta.get("target", "")), compiler="llvm",
        ))
    return result


# ---- public API -------------------------------------------------------------------------------
def _kind_and_arch(target) -> Tuple[str, str]:
    if isinstance(target, HardwareProfile):
        kind, cfg = target.tvm_kind, dict(target.target)
    elif isinstance(target, str):
        from tvm_fusion_hw.hardware.profile import load_profile  # pylint: disable=import-outside-toplevel

        return _kind_and_arch(load_profile(target))
    else:
        kind = target.kind.name
        cfg = {"arch": str(target.attrs.get("arch", "")), "mcpu": str(target.attrs.get("mcpu", ""))}
    arch = str(cfg.get("arch" if kind == "cuda" else "mcpu", ""))
    return kind, arch


def measure(executable, target: Union[object, HardwareProfile, str]) -> List[KernelResources]:
    """Registers, spills, shared memory and block size of every GPU kernel in ``executable``.

    Parameters
    ----------
    executable : tvm.relax.VMExecutable or tvm.runtime.Module
        What ``tvm.compile`` returned (its ``.mod`` import tree is walked).
    target : tvm.target.Target, HardwareProfile or str
        The target it was built for (a profile or its name also works): the kind picks the method,
        ``arch`` (cuda) is the ptxas architecture.

    Returns
    -------
    kernels : list of KernelResources
        One per kernel, in module order. Empty (with a warning) where nvcc is missing for a CUDA
        build or the ROCm module holds no assembly.
    """
    kind, arch = _kind_and_arch(target)
    result: List[KernelResources] = []
    if kind == "cuda":
        modules = device_modules(executable, CUDA_KINDS)
        compiler = cuda_compiler() if modules else None
        if modules and compiler is None:
            warnings.warn("measuring CUDA kernels needs nvcc or NVRTC (cuda-bindings) for ptxas -v; "
                          "neither found: no measurements", stacklevel=2)
            return []
        if modules and compiler == "nvcc" and os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower() == "nvrtc":
            warnings.warn("TVM loads CUDA with NVRTC (cuda-bindings), which is not installed here: "
                          "registers are measured with nvcc, whose front end can differ (dlight's "
                          "conv2d on sm_90: 56 registers with nvcc, 64 with NVRTC, CUDA 13.0)",
                          stacklevel=2)
        for module in modules:
            source = module.inspect_source("cuda") or module.inspect_source("")
            result += measure_cuda_source(source, arch, launch=launches(executable, module),
                                          compiler=compiler)
    elif kind == "rocm":
        for module in device_modules(executable, ROCM_KINDS):
            asm = module.inspect_source("asm")
            if not asm:
                warnings.warn("the ROCm module holds no assembly (AMDGPU metadata); it needs a "
                              "ROCm build with ld.lld and the device libraries: no measurements",
                              stacklevel=2)
                continue
            result += measure_amdgpu_asm(asm, launch=launches(executable, module))
    else:
        raise FusionHWError(f"target kind '{kind}' has no kernel measurements (cuda or rocm)")
    for kr in result:
        if kr.threads_per_block and kr.max_threads_per_block and kr.threads_per_block > kr.max_threads_per_block:
            warnings.warn(
                f"kernel {kr.name} is launched with {kr.threads_per_block} threads per block but was "
                f"compiled for at most {kr.max_threads_per_block} (TVM's ROCm codegen uses 256 when "
                "no AMD GPU is present): as built it cannot run this launch",
                stacklevel=2)
    return result


def occupancy_of(kr: KernelResources, profile: HardwareProfile) -> Occupancy:
    """Occupancy of a measured kernel on ``profile`` (vendor method of :mod:`.occupancy`).

    Uses the launch's block size, else the compiled-for bound (``__launch_bounds__`` /
    ``.max_flat_workgroup_size``); unknown dynamic shared memory counts as none.
    """
    threads = kr.threads_per_block or kr.max_threads_per_block
    if not threads:
        raise FusionHWError(f"kernel {kr.name}: threads per block unknown")
    return occupancy(profile, threads, kr.registers, kr.shared_bytes, scalar_registers=kr.scalar_registers)
