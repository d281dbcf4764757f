"""What the compiler made of each kernel: registers, spills, shared memory, block size.

:func:`measure` reads a built executable (``tvm.compile``'s result) and returns one
:class:`KernelResources` per GPU kernel; :func:`occupancy_of` turns one into an
:class:`~tvm_fusion_hw.occupancy.Occupancy` on a profile. This is the measuring half of the
register-feedback loop (design.md: "feedback (ptxas / AMDGPU metadata: registers, spills, smem,
occupancy)").

CUDA
    ``tvm.compile`` keeps CUDA *source*; it is compiled when the module is loaded, by the global
    function ``tvm_callback_cuda_compile``: NVRTC (through ``cuda-bindings``) by default, nvcc with
    ``TVM_CUDA_COMPILE_MODE=nvcc``. The source is compiled here again the same way and ptxas'
    ``-v`` report is parsed (registers, spill stores and loads, stack frame, static shared memory,
    barriers): with NVRTC through TVM's own ``tvm.support.nvcc.compile_cuda`` (its options, its
    environment variables), the report read from the NVRTC program log; with nvcc by the command
    of TVM's nvcc path (``-O3``, ``--use_fast_math``, ``-gencode arch=compute_XY,code=sm_XY``, the
    ``-U__CUDA_NO_*`` defines, ``--ptxas-options=-v,--register-usage-level=10,
    --warn-on-local-memory-usage``) plus ``-w``, to a cubin. The two front ends do not always give
    the same code: for dlight's conv2d kernel on sm_90 (CUDA 13.0.88 both) NVRTC's PTX needs 64
    registers, nvcc's 56. So the compiler TVM loads with is used where it is installed, and
    :attr:`KernelResources.compiler` says which one measured. Threads per block come from the
    launch (below), else from ``__launch_bounds__(N)``, which TVM's CUDA codegen writes as the
    product of the kernel's thread extents.
ROCm
    The code object's AMDGPU metadata (the ``hip`` module's ``inspect_source("asm")``, section
    ``.amdgpu_metadata``): ``.vgpr_count`` (arch + AGPRs), ``.sgpr_count``, ``.agpr_count``,
    ``.vgpr_spill_count``, ``.sgpr_spill_count``, ``.group_segment_fixed_size`` (static LDS),
    ``.private_segment_fixed_size`` (scratch per work-item), ``.max_flat_workgroup_size``.
    Nothing outside TVM is needed to read them.
Launch configuration (both)
    Grid and block extents and the dynamic shared memory size are launch arguments, not part of
    the kernel. They are read from the host module: the launch-parameter tags of each kernel
    from the device module's serialized function table, and their values from the constants the
    host code stores into the argument array of each kernel call (LLVM IR). Where a value is not
    a constant (dynamic shapes) it stays unknown (``None``).

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
import struct
import subprocess
import tempfile
import warnings
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import FusionHWError
from .occupancy import Occupancy, occupancy
from .profile import HardwareProfile

SOURCES = ("ptxas", "amdgpu-metadata", "estimate")
CUDA_KINDS = ("cuda",)
ROCM_KINDS = ("hip", "rocm")


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


# ---- walking the executable -------------------------------------------------------------------
def _root(executable):
    return getattr(executable, "mod", executable)


def _walk(module) -> Iterator[object]:
    yield module
    for imported in module.imports:
        yield from _walk(imported)


def device_modules(executable, kinds: Sequence[str] = CUDA_KINDS + ROCM_KINDS) -> List[object]:
    """The device modules (``kind`` in ``kinds``) in an executable's import tree."""
    return [m for m in _walk(_root(executable)) if m.kind in kinds]


def _host_modules(executable) -> List[object]:
    """Modules that import device modules (the host code that launches them)."""
    return [m for m in _walk(_root(executable))
            if any(i.kind in CUDA_KINDS + ROCM_KINDS for i in m.imports)]


# ---- launch configuration from the host -----------------------------------------------------
def _u64(blob: bytes, pos: int) -> Tuple[int, int]:
    return struct.unpack_from("<Q", blob, pos)[0], pos + 8


def _string(blob: bytes, pos: int) -> Tuple[str, int]:
    size, pos = _u64(blob, pos)
    if size > 4096 or pos + size > len(blob):
        raise ValueError("not a string")
    return blob[pos:pos + size].decode("utf-8"), pos + size


def parse_launch_tags(blob: bytes, names: Sequence[str]) -> Dict[str, List[str]]:
    """Launch-parameter tags of ``names`` from a serialized device module.

    Each kernel's ``FunctionInfo`` is stored as (TVM 0.27, ``runtime/meta_data``): its map key and
    its name as length-prefixed strings, the argument types (a count, then 4 bytes each), then
    the launch-parameter tags (a count, then strings), e.g. ``["blockIdx.x", "threadIdx.x"]`` and
    a last ``"tirx.use_dyn_shared_memory"`` when the kernel takes dynamic shared memory.
    """
    tags: Dict[str, List[str]] = {}
    for name in names:
        key = struct.pack("<Q", len(name)) + name.encode()
        start = blob.find(key + key)
        if start < 0:
            continue
        try:
            pos = start + 2 * len(key)
            nargs, pos = _u64(blob, pos)
            pos += 4 * nargs
            ntags, pos = _u64(blob, pos)
            if ntags > 16:
                continue
            found = []
            for _ in range(ntags):
                tag, pos = _string(blob, pos)
                found.append(tag)
            tags[name] = found
        except (ValueError, struct.error, UnicodeDecodeError):
            continue
    return tags


_GEP = re.compile(r"^\s*(%[\w.]+) = getelementptr inbounds (?:nuw )?i8, ptr (%[\w.]+), i64 (\d+)")
_STORE = re.compile(r"^\s*store i64 (-?\d+|%[\w.]+), ptr (%[\w.]+),")
_LOAD_FN = re.compile(r"^\s*(%[\w.]+) = load ptr, ptr @\.tvm_func\.([\w.$]+),")
_CALL = re.compile(r"call i32 %[\w.]+\(ptr (%[\w.]+), ptr (?:nonnull )?(%[\w.]+), i32 (\d+),")


def parse_host_launches(llvm_ir: str) -> Dict[str, List[Optional[int]]]:
    """Integer arguments of each kernel call in host LLVM IR: ``{kernel: [arg0, arg1, ...]}``.

    TVM's host code fills an array of 16-byte ``TVMFFIAny`` (value at offset 8) and calls the
    kernel's packed function; an argument is its last constant ``store i64`` before the call, in
    text order, and ``None`` where it is not a constant or not an integer (the buffers).
    """
    launches: Dict[str, List[Optional[int]]] = {}
    geps: Dict[str, Tuple[str, int]] = {}
    values: Dict[Tuple[str, int], Optional[int]] = {}
    loads: Dict[str, str] = {}
    for line in llvm_ir.splitlines():
        if line.startswith("define "):
            geps, values, loads = {}, {}, {}
            continue
        match = _GEP.match(line)
        if match:
            geps[match.group(1)] = (match.group(2), int(match.group(3)))
            continue
        match = _STORE.match(line)
        if match:
            where = geps.get(match.group(2), (match.group(2), 0))
            values[where] = int(match.group(1)) if not match.group(1).startswith("%") else None
            continue
        match = _LOAD_FN.match(line)
        if match:
            loads[match.group(1)] = match.group(2)
            continue
        match = _CALL.search(line)
        if match and match.group(1) in loads:
            base, nargs = match.group(2), int(match.group(3))
            launches[loads[match.group(1)]] = [values.get((base, 16 * k + 8)) for k in range(nargs)]
    return launches


@dataclasses.dataclass(frozen=True)
class Launch:
    """A kernel's launch configuration, as far as the host code fixes it."""

    threads_per_block: Optional[int] = None
    grid_blocks: Optional[int] = None
    dynamic_shared_bytes: Optional[int] = 0
    uses_dynamic_shared: bool = False


def _launch_of(tags: Sequence[str], args: Sequence[Optional[int]]) -> Launch:
    if len(args) < len(tags):
        return Launch(uses_dynamic_shared=any(t.endswith("use_dyn_shared_memory") for t in tags))
    values = dict(zip(tags, args[len(args) - len(tags):]))
    threads: Optional[int] = 1
    blocks: Optional[int] = 1
    dyn: Optional[int] = 0
    uses_dyn = False
    for tag, value in values.items():
        if tag.startswith("threadIdx."):
            threads = None if value is None or threads is None else threads * value
        elif tag.startswith("blockIdx."):
            blocks = None if value is None or blocks is None else blocks * value
        elif tag.endswith("use_dyn_shared_memory"):
            uses_dyn, dyn = True, value
    return Launch(threads, blocks, dyn, uses_dyn)


def launches(executable, device_module) -> Dict[str, Launch]:
    """Launch configuration of every kernel of ``device_module`` that the host launches."""
    from tvm_ffi import get_global_func  # pylint: disable=import-outside-toplevel

    pack = get_global_func("runtime.ModulePackImportsToTensor", allow_missing=True)
    result: Dict[str, Launch] = {}
    for host in _host_modules(executable):
        if not any(i.same_as(device_module) for i in host.imports):
            continue
        try:
            ir = host.inspect_source("ll")
            calls = parse_host_launches(ir)
            blob = bytes(pack(host).numpy()) if pack is not None else b""
        except Exception:  # pylint: disable=broad-except
            continue
        tags = parse_launch_tags(blob, sorted(calls))
        for name, args in calls.items():
            if name in tags:
                result[name] = _launch_of(tags[name], args)
    return result


# ---- CUDA: ptxas ------------------------------------------------------------------------------
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\(\s*(\d+)[^)]*\)\s+(\w+)\s*\(")
_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_PROPS = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")


def cuda_kernel_names(cuda_source: str) -> List[str]:
    """Names of the ``__global__`` kernels defined or declared in CUDA source, in order, once each."""
    pattern = r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\("
    return list(dict.fromkeys(re.findall(pattern, cuda_source)))


def parse_launch_bounds(cuda_source: str) -> Dict[str, int]:
    """``{kernel: N}`` from ``__launch_bounds__(N) kernel(`` in CUDA source."""
    return {name: int(n) for n, name in _LAUNCH_BOUNDS.findall(cuda_source)}


def parse_ptxas(output: str) -> Dict[str, Dict[str, object]]:
    """Per entry function, what ``ptxas -v`` reported.

    Returns ``{kernel: {"arch", "registers", "spill_store_bytes", "spill_load_bytes",
    "stack_frame_bytes", "shared_bytes", "barriers"}}``; non-entry functions are left out.
    """
    kernels: Dict[str, Dict[str, object]] = {}
    entries: Dict[str, str] = {}
    current: Optional[str] = None
    for line in output.splitlines():
        match = _PTXAS_ENTRY.search(line)
        if match:
            current = match.group(1)
            entries[current] = match.group(2)
            kernels[current] = {"arch": match.group(2), "registers": 0, "spill_store_bytes": 0,
                                "spill_load_bytes": 0, "stack_frame_bytes": 0, "shared_bytes": 0,
                                "barriers": 0}
            continue
        match = _PTXAS_PROPS.search(line)
        if match:
            current = match.group(1) if match.group(1) in entries else None
            continue
        if current is None:
            continue
        match = _PTXAS_FRAME.search(line)
        if match:
            kernels[current].update(stack_frame_bytes=int(match.group(1)),
                                    spill_store_bytes=int(match.group(2)),
                                    spill_load_bytes=int(match.group(3)))
            continue
        match = _PTXAS_USED.search(line)
        if match:
            info = kernels[current]
            info["registers"] = int(match.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            bars = re.search(r"used (\d+) barriers", line)
            info["shared_bytes"] = int(smem.group(1)) if smem else 0
            info["barriers"] = int(bars.group(1)) if bars else 0
    return kernels


def _tvm_ptxas_flags() -> List[str]:
    try:  # mirror TVM's own flags and their environment variables
        from tvm.support.nvcc import _ptxas_option_flags  # pylint: disable=import-outside-toplevel

        return list(_ptxas_option_flags())
    except (ImportError, AttributeError):
        return ["-v", "--register-usage-level=10", "--warn-on-local-memory-usage"]


def nvcc_command(nvcc: str, arch: str, source: str, output: str) -> List[str]:
    """The nvcc command TVM's nvcc path (tvm/support/nvcc.py) would run, for a cubin, plus ``-w``."""
    suffix = arch[3:] if arch.startswith("sm_") else arch
    ptxas = list(_tvm_ptxas_flags())
    if "-v" not in ptxas:
        ptxas.insert(0, "-v")
    return [
        nvcc, "--cubin", "-O3", "-gencode", f"arch=compute_{suffix},code=sm_{suffix}",
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
        "--expt-relaxed-constexpr", "--expt-extended-lambda",
        *([] if os.environ.get("TVM_CUDA_NVCC_NO_FAST_MATH") else ["--use_fast_math"]),
        f"--ptxas-options={','.join(ptxas)}", "-w", "-o", output, source,
    ]


def ptxas_report(cuda_source: str, arch: str, nvcc: Optional[str] = None, timeout: float = 300) -> str:
    """Compile CUDA source with nvcc to a cubin in a temporary directory; return its ptxas -v report."""
    from .toolchain import nvcc_path  # pylint: disable=import-outside-toplevel

    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise FusionHWError("nvcc not found: register counts need the CUDA toolkit's nvcc")
    with tempfile.TemporaryDirectory(prefix="tvm_fusion_hw_ptxas_") as tmp:
        src, out = os.path.join(tmp, "tvm_kernels.cu"), os.path.join(tmp, "tvm_kernels.cubin")
        with open(src, "w", encoding="utf-8") as handle:
            handle.write(cuda_source)
        proc = subprocess.run(nvcc_command(nvcc, arch, src, out), capture_output=True, text=True,
                              timeout=timeout, check=False)
    if proc.returncode != 0:
        raise FusionHWError(f"nvcc failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
    return proc.stdout + proc.stderr


def have_nvrtc() -> bool:
    """Whether NVRTC (``cuda-bindings`` and its library) is usable here, as TVM's loader needs it."""
    try:
        from cuda.bindings import nvrtc  # pylint: disable=import-outside-toplevel

        return nvrtc.nvrtcVersion()[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:  # pylint: disable=broad-except
        return False


def nvrtc_report(cuda_source: str, arch: str) -> str:
    """Compile CUDA source as TVM's default loader does (NVRTC); return the program log (ptxas -v).

    Calls ``tvm.support.nvcc.compile_cuda(..., compiler="nvrtc")`` itself, so the options are
    TVM's own, and reads the NVRTC program log after ``nvrtcCompileProgram`` (TVM keeps it only
    on failure).
    """
    from cuda.bindings import nvrtc  # pylint: disable=import-outside-toplevel
    from tvm.support import nvcc as tvm_nvcc  # pylint: disable=import-outside-toplevel

    logs: List[str] = []
    compile_program = nvrtc.nvrtcCompileProgram

    def compile_and_keep_log(prog, *args):
        result = compile_program(prog, *args)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and size > 1:
            buf = bytearray(size)
            if nvrtc.nvrtcGetProgramLog(prog, buf)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                logs.append(bytes(buf).rstrip(b"\x00").decode("utf-8", errors="replace"))
        return result

    saved_cuda_path = os.environ.get("CUDA_PATH")
    home = _cuda_home()
    if home is not None:  # TVM takes the headers from $CUDA_PATH, else from `which nvcc`/../..
        os.environ["CUDA_PATH"] = home
    nvrtc.nvrtcCompileProgram = compile_and_keep_log
    try:
        tvm_nvcc.compile_cuda(cuda_source, target_format="cubin", arch=arch, compiler="nvrtc")
    except RuntimeError as err:
        raise FusionHWError(f"NVRTC failed: {str(err)[-2000:]}") from None
    finally:
        nvrtc.nvrtcCompileProgram = compile_program
        if saved_cuda_path is None:
            os.environ.pop("CUDA_PATH", None)
        else:
            os.environ["CUDA_PATH"] = saved_cuda_path
    return "\n".join(logs)


def _cuda_home() -> Optional[str]:
    """A CUDA toolkit root with headers: $CUDA_PATH, $CUDA_HOME, nvcc's real location, /usr/local/cuda."""
    from .toolchain import nvcc_path  # pylint: disable=import-outside-toplevel

    nvcc = nvcc_path()
    cands = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None, "/usr/local/cuda"]
    if nvcc:  # a wrapper script (exec /path/to/cuda/bin/nvcc "$@") hides the toolkit
        try:
            with open(nvcc, "rb") as handle:
                head = handle.read(512).decode("utf-8", errors="replace")
            match = re.search(r"exec\s+(\S+)/bin/nvcc", head)
            if match:
                cands.insert(2, match.group(1))
        except OSError:
            pass
    return next((c for c in cands if c and os.path.isfile(os.path.join(c, "include", "cuda_runtime.h"))), None)


def cuda_compiler() -> Optional[str]:
    """The compiler :func:`measure` uses for CUDA here: TVM's load-time one where installed.

    ``"nvrtc"`` where TVM loads with NVRTC (``TVM_CUDA_COMPILE_MODE`` unset or ``nvrtc``) and
    ``cuda-bindings`` works, ``"nvcc"`` where nvcc is found (TVM's nvcc mode, or the fallback),
    else ``None``.
    """
    from .toolchain import nvcc_path  # pylint: disable=import-outside-toplevel

    mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower()
    if mode == "nvrtc" and have_nvrtc():
        return "nvrtc"
    return "nvcc" if nvcc_path() is not None else None


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
_META_KEYS = {
    ".name": "name", ".vgpr_count": "vgpr_count", ".sgpr_count": "sgpr_count",
    ".agpr_count": "agpr_count", ".vgpr_spill_count": "vgpr_spill_count",
    ".sgpr_spill_count": "sgpr_spill_count", ".group_segment_fixed_size": "group_segment_fixed_size",
    ".private_segment_fixed_size": "private_segment_fixed_size",
    ".max_flat_workgroup_size": "max_flat_workgroup_size", ".wavefront_size": "wavefront_size",
    ".uses_dynamic_stack": "uses_dynamic_stack",
}


def parse_amdgpu_metadata(asm: str) -> List[Dict[str, object]]:
    """The kernel entries of the ``.amdgpu_metadata`` block (``amdhsa.kernels``) of GCN assembly.

    A small reader of that YAML document: a kernel starts at ``  - `` under ``amdhsa.kernels:``;
    its own keys sit at one indentation level (the ``.args`` entries, deeper, are skipped).
    Values are ints where they parse, else strings. Also returns ``"target"`` (the gfx name).
    """
    start = asm.find(".amdgpu_metadata")
    end = asm.find(".end_amdgpu_metadata", start)
    if start < 0:
        return []
    text = asm[start:end if end > 0 else len(asm)]
    target = re.search(r"amdhsa\.target:\s+\S*?(gfx\w+)", text)
    kernels: List[Dict[str, object]] = []
    in_kernels = False
    key_indent = None
    for line in text.splitlines():
        if re.match(r"^amdhsa\.kernels:", line):
            in_kernels = True
            continue
        if re.match(r"^\S", line):  # next top-level key
            in_kernels = False
            continue
        if not in_kernels:
            continue
        item = re.match(r"^(\s*)- (\.\w+):\s*(.*)$", line)
        if item and (key_indent is None or len(item.group(1)) + 2 == key_indent):
            key_indent = len(item.group(1)) + 2
            kernels.append({"target": target.group(1) if target else ""})
            line = " " * key_indent + item.group(2) + ": " + item.group(3)
        field = re.match(r"^(\s*)(\.\w+):\s*(.*)$", line)
        if not field or not kernels or len(field.group(1)) != key_indent:
            continue
        if field.group(2) in _META_KEYS and field.group(3):
            value = field.group(3).strip()
            kernels[-1][_META_KEYS[field.group(2)]] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return kernels


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
        from .profile import load_profile  # pylint: disable=import-outside-toplevel

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
