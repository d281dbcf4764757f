"""Ahead-of-time CUDA binaries for a benchmark bundle, so that the GPU box need not compile.

:func:`precompile_cuda` compiles each distinct CUDA source of the bundle's libraries with nvcc,
through the runner's own compile function (TVM's flags) and under its cache key, into
``cubin/<key>.bin.xz``. The runner loads them where the GPU's arch matches and compiles the rest
itself. :mod:`.writer` calls it once every library is built.
"""

from __future__ import annotations

import importlib.util
import lzma
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

from tvm_fusion_hw.hardware.toolchain import nvcc_path

from .runtime import runner_source


def _load_runner():
    """The runner (``runner.py``, which loads its ``runner_*.py`` from its folder) as a module: its
    CUDA compile function and cache key are reused here."""
    spec = importlib.util.spec_from_file_location("tvm_fusion_hw_bench_runner", runner_source())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def precompile_cuda(out: Path, sources: Dict[str, str], arch: str, log,
                    jobs: Optional[int] = None) -> Dict[str, object]:
    """Compile every distinct CUDA source with nvcc (TVM's flags) into ``out/cubin/<key>.bin.xz``.

    The runner uses these instead of compiling on the GPU box when the device's arch matches.
    """
    if nvcc_path() is None:
        log("no nvcc here: the runner will compile CUDA on the GPU box")
        return {}
    runner = _load_runner()
    compile_cuda, _ = runner.make_cuda_compiler(arch, "nvcc")
    (out / "cubin").mkdir(exist_ok=True)

    failed: List[str] = []

    def _one(code: str) -> int:
        key = runner.source_key(arch, code)
        dest = out / "cubin" / f"{key}.bin.xz"
        try:
            data = bytes(compile_cuda(code))
        except RuntimeError as err:  # the runner compiles this one on the GPU box instead
            failed.append(f"{key[:12]}: {str(err)[-300:]}")
            return 0
        with lzma.open(dest, "wb", preset=6) as dst:
            dst.write(data)
        return dest.stat().st_size

    start = time.time()
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        sizes = [size for size in pool.map(_one, sources.values()) if size]
    log(f"precompiled {len(sizes)} CUDA sources for {arch} with nvcc in {time.time() - start:.1f}s "
        f"({sum(sizes) / 2**20:.1f} MiB)" + (f"; {len(failed)} failed: {failed[0]}" if failed else ""))
    nvcc_version = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True,
                                  check=False).stdout.strip().splitlines()
    return {"arch": arch, "count": len(sizes), "failed": failed, "compiler": (nvcc_version or [""])[-1],
            "seconds": round(time.time() - start, 1)}
