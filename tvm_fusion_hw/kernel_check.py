"""Whether scheduled kernels build: the check behind :mod:`.guarded_schedule`, and what it costs.

A template's schedule is accepted only once it builds as the module's build would build it
(``tirx.build`` under the build's PassContext: lowering, software pipelining, ``cp.async``
injection, device and host codegen; with ``verify="device"`` nvcc on its CUDA source too).
What the check costs (it was most of the plugin's compile time over stock's):

* the template kernels of a module are built *together*, one ``tirx.build`` of all of them (per
  target) in as many parts as there are CPUs, side by side on threads (TVM's lowering releases
  the GIL), and only where a part fails is each of its kernels built alone, so that every failure
  is found and reported with its own error, exactly as a build of that kernel alone reports it; a kernel is
  accepted when it built in a module that built. A ROCm build links the device libraries and
  runs ``ld.lld`` once, which made a build per kernel about 1.4x the cost of one build of them all;
* the host side of that build (the packed-function wrapper that launches the kernel) goes through
  TVM's LLVM code generation as in the module's build, at LLVM optimisation level 0 (the wrapper's
  machine code is thrown away): the same TIR passes and the same TIR-to-LLVM translation, without
  LLVM's ``-O3`` pipeline, which was about 40% of a CUDA kernel's check.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.target import Target

from . import kernel_build
from .hardware.toolchain import nvcc_path
from .kernel_build import LoweredStore, codegen, host_target, in_parallel, lower, parts_of


def stores_outside_threads(stmt, bound: bool = False) -> bool:
    """Whether a buffer store of ``stmt`` lies under no loop bound to a GPU thread: that loop nest
    would run on the host over device memory, which builds fine and crashes at run time."""
    if isinstance(stmt, tirx.For):
        return stores_outside_threads(stmt.body, bound or stmt.kind == tirx.ForKind.THREAD_BINDING)
    if isinstance(stmt, tirx.BufferStore):
        return not bound
    if bound:
        return False
    if isinstance(stmt, tirx.SeqStmt):
        return any(stores_outside_threads(s) for s in stmt.seq)
    if isinstance(stmt, s_tir.SBlockRealize):
        return stores_outside_threads(stmt.block)
    if isinstance(stmt, s_tir.SBlock):
        return stores_outside_threads(stmt.body) or (stmt.init is not None and stores_outside_threads(stmt.init))
    if isinstance(stmt, tirx.IfThenElse):
        return stores_outside_threads(stmt.then_case) or (
            stmt.else_case is not None and stores_outside_threads(stmt.else_case))
    stores: list = []
    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, stores.append)], order="post")
    return bool(stores)


def verify_host(target: Target) -> Target:
    """The host a kernel's check generates code for: the build's (:func:`.kernel_build.host_target`)
    at LLVM optimisation level 0. The host code is what TVM's LLVM code generator makes of the
    module's host functions (argument checks, the kernel launch), the same as in the module's
    build; only LLVM's optimisation passes over it are skipped, and its machine code is not kept."""
    host = host_target(target)
    if host.kind.name != "llvm" or target.get_target_device_type() == tvm_ffi.DLDeviceType.kDLCPU:
        return host
    return Target({**dict(host.export()), "opt-level": 0})


def build_together(funcs: Dict[str, tirx.PrimFunc], target: Target,
                   store: Optional[LoweredStore] = None) -> tvm.runtime.Module:
    """``funcs`` (name -> scheduled PrimFunc) lowered and turned into device code as one module,
    apart from the rest of the model (raises what the module build would, and where a loop nest
    of one of them is bound to no thread). The host side is generated at LLVM's ``-O0``
    (:func:`verify_host`); a CPU target is built as it is. ``store`` keeps the lowering, for the
    pipeline's own build of the module (:class:`.kernel_build.BuildKernels`)."""
    for name, func in funcs.items():
        if stores_outside_threads(func.body):
            raise RuntimeError("a loop nest is bound to no GPU thread: it would run on the host over device "
                               "memory" + ("" if len(funcs) == 1 else f" ({name})"))
    lowered = lower(funcs, target)
    built = codegen([lowered], target, verify_host(target))
    if store is not None:
        store.remember(funcs, target, lowered)
    return built


def build_alone(name: str, func: tirx.PrimFunc, target: Target) -> tvm.runtime.Module:
    """``func`` lowered and turned into device code on its own (raises what the module build
    would, and where a loop nest is bound to no thread); see :func:`build_together`."""
    return build_together({name: func}, target)


def _check(funcs: Dict[str, tirx.PrimFunc], target: Target, verify: str,
           store: Optional[LoweredStore]) -> Optional[Tuple[str, Exception]]:
    """None when ``funcs`` build together (and, with ``verify="device"``, their CUDA compiles);
    else the stage that failed and its error."""
    stage = "build"
    try:
        built = build_together(funcs, target, store)
        if verify == "device":
            stage = "device"
            device_compile(built, target)
    except Exception as error:  # pylint: disable=broad-except
        return stage, error
    return None


def verify_kernels(kernels: Sequence[Tuple[str, tirx.PrimFunc]], target: Target, verify: str = "build",
                   store: Optional[LoweredStore] = None) -> Dict[str, Tuple[str, Exception]]:
    """The kernels of ``kernels`` ((name, scheduled PrimFunc) pairs, one target) that fail to
    build alone, each with its stage (``"build"`` or ``"device"``) and error.

    They are built together in as many parts as there are CPUs to build them on (:func:`in_parallel`);
    only where a part fails is each of its kernels built alone, so that a failure is the one a build
    of that kernel alone raises, and a kernel is accepted when it built in a module that built.
    Names that repeat are built alone. Nothing is built with ``verify="none"``. ``store`` keeps the
    lowering of every part that built (:class:`.kernel_build.LoweredStore`).
    """
    if verify == "none" or not kernels:
        return {}
    names = [name for name, _ in kernels]
    parts = [[k] for k in kernels] if len(set(names)) < len(names) else parts_of(list(kernels), kernel_build.build_workers())

    def check(part):
        return _check(dict(part), target, verify, store)

    failed = dict(zip(map(id, parts), in_parallel(check, parts)))
    singles = [[k] for part in parts if failed[id(part)] is not None and len(part) > 1 for k in part]
    failed.update(zip(map(id, singles), in_parallel(check, singles)))
    failures = {part[0][0]: failed[id(part)] for part in parts + singles
                if len(part) == 1 and failed[id(part)] is not None}
    return {name: failures[name] for name in names if name in failures}


def lower_alone(name: str, func: tirx.PrimFunc, target: Target) -> None:
    """``func`` through TVM's TIR lowering alone, no code generation: where dlight's schedules
    fail (a cross-thread reduction whose loops are not the deepest) they fail here, for a
    fraction of a build."""
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name)})
    host = target.host if target.host is not None else Target({"kind": "llvm"})
    mod = tvm.tirx.transform.BindTarget(Target(target, host))(mod)
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    pipeline(mod)


def device_compile(built: tvm.runtime.Module, target: Target) -> None:
    """Compile a built kernel's CUDA source with nvcc, as the runtime compiles it at load time
    (nothing where nvcc or CUDA source is absent)."""
    nvcc = nvcc_path()
    sources = [str(m.inspect_source("")) for m in built.imports if m.kind == "cuda"]
    if nvcc is None or target.kind.name != "cuda" or not sources:
        return
    arch = str(target.attrs.get("arch", "sm_80"))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text("".join(sources))
        done = subprocess.run([nvcc, "--cubin", f"-arch={arch}", "-O3", "-o", str(Path(tmp) / "kernel.cubin"),
                               str(src)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if "error" in ln] or ["nvcc failed"]
        raise RuntimeError(f"nvcc: {lines[0].strip()}")
