"""ptxas' report on TVM's CUDA kernels: registers, spills, stack frame, static shared memory.

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
registers, nvcc's 56. So the compiler TVM loads with is used where it is installed
(:func:`cuda_compiler`), and :attr:`.kernel_resources.KernelResources.compiler` says which one
measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Dict, List, Optional

from tvm_fusion_hw.errors import FusionHWError

_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_PROPS = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")


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
    from tvm_fusion_hw.hardware.toolchain import nvcc_path  # pylint: disable=import-outside-toplevel

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
    from tvm_fusion_hw.hardware.toolchain import nvcc_path  # pylint: disable=import-outside-toplevel

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
    from tvm_fusion_hw.hardware.toolchain import nvcc_path  # pylint: disable=import-outside-toplevel

    mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower()
    if mode == "nvrtc" and have_nvrtc():
        return "nvrtc"
    return "nvcc" if nvcc_path() is not None else None
