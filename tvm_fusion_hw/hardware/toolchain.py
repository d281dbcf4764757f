"""Find the tools that CUDA and ROCm builds need, on machines with or without a GPU.

A CUDA build needs nothing outside TVM: ``tvm.compile`` keeps CUDA source in the module and it is
compiled when the module is loaded. ``nvcc`` is only needed to read registers and spills (ptxas).
A ROCm build links each code object inside ``tvm.compile``; TVM then needs the AMD device-library
bitcode at ``$ROCM_PATH/amdgcn/bitcode`` and an ``ld.lld`` whose LLVM is at least TVM's own (22):
older linkers fail with "unknown abi version". ``scripts/install-system-deps.sh`` installs both.
"""

import os
import platform
import re
import shutil
import subprocess

import tvm
from tvm.support import rocm as _tvm_rocm

from tvm_fusion_hw.errors import FusionHWError

_INSTALL_HINT = "run scripts/install-system-deps.sh"
# Where Debian's rocm-device-libs puts its bitcode, then a full ROCm install.
_DEFAULT_ROCM_PATHS = (f"/usr/lib/{platform.machine()}-linux-gnu", "/opt/rocm")
_CUDA_HOMES = ("/usr/local/cuda",)


def _has_bitcode(path):
    return os.path.isfile(os.path.join(path, "amdgcn", "bitcode", "ocml.bc"))


def rocm_path():
    """Return the ROCm path to give TVM.

    Returns
    -------
    path : str or None
        ``$ROCM_PATH`` when set (even if unusable, so that the error names it), else the first
        default location that has ``amdgcn/bitcode``, else ``None``.
    """
    if os.environ.get("ROCM_PATH"):
        return os.environ["ROCM_PATH"]
    return next((p for p in _DEFAULT_ROCM_PATHS if _has_bitcode(p)), None)


def _lld_major(lld):
    """LLVM major version of an ``ld.lld`` binary, or ``None`` if it cannot be told."""
    try:
        out = subprocess.run([lld, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"LLD (\d+)\.", out)
    return int(match.group(1)) if match else None


def _find_lld():
    """The ``ld.lld`` TVM will use (its own search order), or ``None``."""
    found = _tvm_rocm.find_lld(required=False)
    return found[0] if found else None


def _check_rocm():
    """Return ``(rocm_path, lld)`` if a ROCm build can work, else raise :class:`FusionHWError`."""
    path = rocm_path()
    if path is None or not _has_bitcode(path):
        where = f"ROCM_PATH={path} has" if path else "no ROCm path with"
        raise FusionHWError(f"{where} no amdgcn/bitcode (rocm-device-libs); {_INSTALL_HINT}")
    need = tvm.target.codegen.llvm_version_major(allow_none=True) or 22
    lld = _find_lld()
    if lld is None:
        raise FusionHWError(f"no ld.lld found (need LLD >= {need}, lld-{need}); {_INSTALL_HINT}")
    have = _lld_major(lld)
    if have is None or have < need:
        raise FusionHWError(
            f"TVM would link ROCm code with {lld} (LLD {have}), which is older than TVM's "
            f"LLVM {need} and fails with 'unknown abi version'; {_INSTALL_HINT}"
        )
    return path, lld


def configure_rocm():
    """Set up the environment for a ROCm build in this process.

    Sets ``os.environ["ROCM_PATH"]`` (TVM reads ``$ROCM_PATH/amdgcn/bitcode``). If TVM's linker
    search would miss ``ld.lld-<major>`` but ``/usr/lib/llvm-<major>/bin`` exists, that directory
    is put first on ``PATH``. Call it before ``tvm.compile`` for a ``rocm`` target.

    Returns
    -------
    path : str
        The ROCm path now in ``os.environ["ROCM_PATH"]``.

    Raises
    ------
    FusionHWError
        When the bitcode or a recent enough ``ld.lld`` is missing.
    """
    major = tvm.target.codegen.llvm_version_major(allow_none=True) or 22
    llvm_bin = f"/usr/lib/llvm-{major}/bin"
    if shutil.which(f"ld.lld-{major}") is None and os.path.isdir(llvm_bin):
        os.environ["PATH"] = llvm_bin + os.pathsep + os.environ.get("PATH", "")
    path, _ = _check_rocm()
    os.environ["ROCM_PATH"] = path
    return path


def have_rocm_toolchain():
    """Return whether a ROCm build can work here (for test skips); changes nothing."""
    try:
        _check_rocm()
    except FusionHWError:
        return False
    return True


def nvcc_path():
    """Return the path of ``nvcc`` (``PATH``, ``$CUDA_HOME``, ``/usr/local/cuda``), or ``None``."""
    found = shutil.which("nvcc")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *_CUDA_HOMES]
    cands = [os.path.join(h, "bin", "nvcc") for h in homes if h]
    return next((c for c in cands if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def have_nvcc():
    """Return whether ``nvcc`` is available (for test skips)."""
    return nvcc_path() is not None
