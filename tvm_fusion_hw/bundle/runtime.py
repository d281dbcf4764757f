"""The runtime half of a benchmark bundle: what a GPU box without TVM needs besides the libraries.

The installed ``tvm`` package without its compiler library, the apache-tvm-ffi wheel(s), the
ONNX model builders, and the runner (``runner.py`` beside this file, the bundle's ``run.py``, with
the ``runner_*.py`` it imports from its folder).
:mod:`.writer` writes them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import tvm
import typing_extensions

from tvm_fusion_hw import models as model_zoo
from tvm_fusion_hw.errors import FusionHWError

#: Top-level folders of the installed tvm package that a runtime never needs.
_TVM_SKIP_DIRS = {"include", "src", "3rdparty", "web"}
_TVM_SKIP_FILES = {os.path.join("lib", "libtvm_compiler.so")}
#: The package's root folder (``tvm_fusion_hw/``) and, in a source checkout, the repository's.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
REPO = PACKAGE_DIR.parent


def wheel_cache() -> Path:
    """Where downloaded wheels are kept between bundles: the user's cache, never the package."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tvm_fusion_hw" / "wheels"


def copy_tvm_runtime(dest: Path) -> Path:
    """Copy the installed ``tvm`` package to ``dest/tvm`` without the compiler library.

    Also copies ``typing_extensions.py`` (a pure-Python import of tvm-ffi) beside it.
    """
    src = Path(tvm.__file__).resolve().parent

    def _ignore(folder: str, names: List[str]) -> List[str]:
        rel = os.path.relpath(folder, src)
        skip = [n for n in names if n == "__pycache__"]
        if rel == ".":
            skip += [n for n in names if n in _TVM_SKIP_DIRS]
        skip += [n for n in names if os.path.normpath(os.path.join(rel, n)) in _TVM_SKIP_FILES]
        return skip

    if (dest / "tvm").exists():
        shutil.rmtree(dest / "tvm")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest / "tvm", ignore=_ignore)
    shutil.copy2(typing_extensions.__file__, dest / "typing_extensions.py")
    return dest / "tvm"


def fetch_tvm_ffi_wheels(dest: Path, python_versions: Sequence[str] = ("3.12",),
                         cache: Optional[Path] = None) -> List[str]:
    """Put the apache-tvm-ffi wheel matching the installed version into ``dest``, one per Python.

    Wheels are taken from ``cache`` (default :func:`wheel_cache`) or downloaded there with
    ``pip download`` first.
    """
    ver = version("apache-tvm-ffi")
    cache = Path(cache) if cache else wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for pyver in python_versions:
        tag = "cp" + pyver.replace(".", "")
        pattern = f"apache_tvm_ffi-{ver}-{tag}-*.whl"
        found = sorted(cache.glob(pattern))
        if not found:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--python-version", pyver, "--implementation", "cp",
                   "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                   "-d", str(cache), f"apache-tvm-ffi=={ver}"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            found = sorted(cache.glob(pattern))
            if not found:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise FusionHWError(f"could not get the apache-tvm-ffi {ver} wheel for Python "
                                    f"{pyver} into {cache}: {tail[0]}")
        shutil.copy2(found[-1], dest / found[-1].name)
        names.append(found[-1].name)
    return names


def copy_builders(dest: Path) -> Path:
    """Copy the model builders and ``errors.py`` as a minimal ``tvm_fusion_hw`` package."""
    pkg = dest / "tvm_fusion_hw"
    if pkg.exists():
        shutil.rmtree(pkg)
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Model builders only (copied by tvm_fusion_hw.bundle)."""\n')
    shutil.copy2(PACKAGE_DIR / "errors.py", pkg / "errors.py")
    zoo = Path(model_zoo.__file__).parent
    for src in zoo.glob("*.py"):
        shutil.copy2(src, pkg / "models" / src.name)
    # the corpus: its loader, index and stripped graphs (a few hundred KiB), weights seeded there,
    # and torch_source.py, its PyTorch constructors (the runner's PyTorch columns); not export.py
    shutil.copytree(zoo / "corpus", pkg / "models" / "corpus",
                    ignore=shutil.ignore_patterns("__pycache__", "export.py", "survey.py", "README.md"))
    return pkg


#: The runner's files beside this one, by their names in the bundle: ``runner.py`` runs as
#: ``run.py`` and imports the others from its own folder.
RUNNER_FILES = {"run.py": "runner.py", "runner_timing.py": "runner_timing.py",
                "runner_report.py": "runner_report.py"}


def runner_files() -> Dict[str, Path]:
    """The runner's files (installed with the package), by their names in the bundle."""
    files = {name: Path(__file__).with_name(src) for name, src in RUNNER_FILES.items()}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise FusionHWError(f"{missing[0]} not found: the tvm_fusion_hw installation is incomplete")
    return files


def runner_source() -> Path:
    """Path of the runner's main file (the bundle's ``run.py``; it loads its siblings itself)."""
    return runner_files()["run.py"]


def copy_runner(dest: Path) -> None:
    """Copy the runner into ``dest``: ``run.py`` and the files it imports beside it."""
    for name, src in runner_files().items():
        shutil.copy2(src, dest / name)
