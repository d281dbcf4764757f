"""Built executables as a bundle's files: the exported library (xz-compressed or not) and the CUDA
source it carries (what the runtime hands to its compile callback, and what the bundle precompiles)."""

from __future__ import annotations

import lzma
import re
import shutil
from pathlib import Path
from typing import Dict, Optional


def file_stem(name: str) -> str:
    """``name`` as a file name: letters, digits, ``.``, ``_`` and ``-`` ("corpus:resnet18" ->
    "corpus_resnet18")."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def cuda_source(ex) -> Optional[str]:
    """The CUDA source a built executable or runtime module carries (what the runtime hands to
    the compile callback)."""
    stack = [ex.mod if hasattr(ex, "mod") else ex]
    while stack:
        mod = stack.pop()
        if mod.kind == "cuda":
            return str(mod.inspect_source(""))
        stack.extend(mod.imports)
    return None


def export_library(ex, out: Path, stem: str, compress: bool) -> Dict[str, object]:
    """Export one executable as ``stem.so`` (or ``stem.so.xz``); return the manifest variant."""
    lib = out / f"{stem}.so"
    ex.export_library(str(lib))
    size = lib.stat().st_size
    stored = lib.name
    if compress:
        stored = lib.name + ".xz"
        with open(lib, "rb") as src, lzma.open(out / stored, "wb", preset=6) as dst:
            shutil.copyfileobj(src, dst)
        lib.unlink()
    return {"file": lib.name, "stored": stored, "so_bytes": size,
            "stored_bytes": (out / stored).stat().st_size}
