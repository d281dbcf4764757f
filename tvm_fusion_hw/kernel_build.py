"""Building a module's kernels in the pipeline: each kernel lowered once, the lowering on every CPU.

``tvm.compile`` lowers every PrimFunc of a module after its Relax pipeline, one after another on one
core, and a template's kernel has by then been lowered once already, by the guard's check
(:mod:`.kernel_check`). :class:`BuildKernels`, the pipeline's last pass, builds the kernels itself:

1. a kernel the check lowered, and that is still the PrimFunc it lowered, keeps that lowering
   (:class:`LoweredStore`); the rest (dlight's kernels, shape functions, anything changed since)
   are lowered here, in one part per CPU side by side (TVM's lowering releases the GIL), with the
   same passes, target and PassContext as ``tvm.compile``'s own build (``tirx.build``);
2. the code of all of them is generated in one go, as ``tirx.build`` generates it;
3. that library is linked to the module as an external library (``external_mods``, as BYOC
   backends link theirs) and each reference to a kernel becomes a reference to the library's
   function of the same name, which is what the VM's bytecode calls either way. The module keeps
   no PrimFunc, so ``tvm.compile`` has nothing left to build.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.target import Target
from tvm.tirx.build import split_host_device_mods, tir_to_runtime

from .fusion.memo import context_key, target_key
from .schedules.base import one_barrier

#: TVM's attribute for the one function a module's ``__tvm_main__`` stands for; a part of one kernel
#: lowered alone gets it, a module of several has none.
_ENTRY_ATTR = "tirx.is_entry_func"


def host_target(target: Target) -> Target:
    """The host ``tirx.build`` generates code for beside ``target``: its host, llvm without one
    (``c`` where TVM has no LLVM), ``target`` itself for a CPU target."""
    if target.host is not None:
        return target.host
    if target.get_target_device_type() == tvm_ffi.DLDeviceType.kDLCPU:
        return target
    return Target("llvm" if tvm.runtime.enabled("llvm") else "c")


@dataclasses.dataclass
class Lowered:
    """Kernels after TIR lowering, split and finalised as ``tirx.build`` does before code
    generation: their host functions and, per device target, their device functions."""

    host: Dict[str, tirx.PrimFunc]
    devices: Dict[str, Dict[str, tirx.PrimFunc]]  # str(target) -> name -> function
    targets: Dict[str, Target]  # str(target) -> target

    def per_kernel(self, names: Sequence[str]) -> Optional[Dict[str, "Lowered"]]:
        """This lowering cut into one per kernel of ``names``: a kernel's host function has its name,
        its device functions are those its host function launches (by name). None where a function
        belongs to no kernel of ``names``."""
        if set(self.host) != set(names):
            return None
        owner = {}
        for name in names:
            strings: list = []
            tvm_ffi.structural_walk(self.host[name], [(tvm.ir.StringImm, strings.append)], order="post")
            for s in strings:
                owner.setdefault(s.value, name)
        cut = {name: Lowered({name: self.host[name]}, {}, self.targets) for name in names}
        for key, funcs in self.devices.items():
            for fname, func in funcs.items():
                if fname not in owner:
                    return None
                cut[owner[fname]].devices.setdefault(key, {})[fname] = func
        return cut


def lower(funcs: Dict[str, tirx.PrimFunc], target: Target) -> Lowered:
    """``funcs`` (name -> PrimFunc) through ``tirx.build``'s steps before code generation: bound to
    ``target`` and its host, TVM's default TIR pipeline, split into host and device functions,
    finalised (under the current PassContext, as ``tvm.compile`` builds)."""
    mod = tvm.IRModule({name: _with_symbol(name, func) for name, func in funcs.items()})
    mod = tirx.transform.BindTarget(Target(target).with_host(host_target(target)))(mod)
    # TVM's default pipeline, then the one-barrier rewrite of the loops a schedule marked
    pipeline, finalize_host, finalize_device = tirx.get_tir_pipeline(one_barrier.PIPELINE)
    host_mod, device_mods = split_host_device_mods(pipeline(mod))
    host_mod = finalize_host()(host_mod)
    devices, targets = {}, {}
    for dev_target, dev_mod in device_mods.items():
        key = str(dev_target)
        devices[key] = {gv.name_hint: f for gv, f in finalize_device()(dev_mod).functions_items()}
        targets[key] = dev_target
    return Lowered({gv.name_hint: f for gv, f in host_mod.functions_items()}, devices, targets)


def codegen(parts: Sequence[Lowered], target: Target, host: Optional[Target] = None) -> tvm.runtime.Module:
    """One runtime module of the lowered ``parts`` (their host code for ``host``, by default
    :func:`host_target`), generated as ``tirx.build`` generates a module's code."""
    host_funcs = {name: f for part in parts for name, f in part.host.items()}
    if len(host_funcs) > 1:  # parts of one kernel each name it their entry; a module of several has none
        host_funcs = {name: f.without_attr(_ENTRY_ATTR) if _ENTRY_ATTR in f.attrs else f
                      for name, f in host_funcs.items()}
    devices: Dict[str, Dict[str, tirx.PrimFunc]] = {}
    targets: Dict[str, Target] = {}
    for part in parts:
        for key, funcs in part.devices.items():
            devices.setdefault(key, {}).update(funcs)
            targets[key] = part.targets[key]
    device_mods = {targets[key]: tvm.IRModule(funcs) for key, funcs in devices.items()}
    return tir_to_runtime(tvm.IRModule(host_funcs), device_mods, host or host_target(target))


class LoweredStore:
    """The lowering of each kernel the guard's check built, by name, for :class:`BuildKernels`,
    given back only for a structurally equal PrimFunc, the same target and the same PassContext
    options (a lowering depends on all three; buffer names only name the generated code's
    variables)."""

    def __init__(self):
        self._lowered: Dict[tuple, List[tuple]] = {}

    @staticmethod
    def _key(name: str, func: tirx.PrimFunc, target: Target) -> tuple:
        bound = Target(target).with_host(host_target(target))
        return name, target_key(bound), context_key(), tvm_ffi.structural_hash(func)

    def remember(self, funcs: Dict[str, tirx.PrimFunc], target: Target, lowered: Lowered) -> None:
        """Keep ``lowered``, the lowering of ``funcs`` (name -> PrimFunc) for ``target``, kernel by
        kernel (nothing where it cannot be cut into kernels: they are lowered again)."""
        for name, part in (lowered.per_kernel(list(funcs)) or {}).items():
            func = _with_symbol(name, funcs[name])
            self._lowered.setdefault(self._key(name, func, target), []).append((func, part))

    def take(self, name: str, func: tirx.PrimFunc, target: Target) -> Optional[Lowered]:
        """The kept lowering of kernel ``name`` when it was ``func`` for ``target``; else None."""
        func = _with_symbol(name, func)
        for kept, part in self._lowered.get(self._key(name, func, target), ()):
            if tvm_ffi.structural_equal(kept, func):
                return part
        return None


def _with_symbol(name: str, func: tirx.PrimFunc) -> tirx.PrimFunc:
    return func.with_attr("global_symbol", name)


def build_workers() -> int:
    """CPUs this process may run on (TVM's lowering releases the GIL: builds run side by side)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parts_of(items: list, count: int) -> List[list]:
    """``items`` dealt into at most ``count`` non-empty parts."""
    count = max(1, min(count, len(items)))
    return [items[i::count] for i in range(count)]


def in_parallel(fn: Callable, items: Sequence) -> list:
    """``[fn(item) for item in items]`` on up to one thread per CPU (:func:`build_workers`), every
    thread under a copy of the caller's PassContext (its options; not its instruments, which are not
    made for two threads at once)."""
    workers = min(len(items), build_workers())
    if workers <= 1:
        return [fn(item) for item in items]
    ctx = tvm.transform.PassContext.current()

    def run(item):
        with tvm.transform.PassContext(opt_level=ctx.opt_level, required_pass=list(ctx.required_pass),
                                       disabled_pass=list(ctx.disabled_pass), config=dict(ctx.config)):
            return fn(item)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, items))


@relax.expr_functor.mutator
class _KernelsToLibrary(relax.PyExprMutator):
    """Each reference to one of ``names`` (the module's PrimFuncs) made a reference to the linked
    library's function of that name."""

    def __init__(self, mod: tvm.IRModule, names: set):
        super().__init__(mod)
        self.names = names

    def visit_global_var_(self, op: relax.GlobalVar) -> relax.Expr:
        return relax.ExternFunc(op.name_hint) if op.name_hint in self.names else op

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        if isinstance(op.op, relax.GlobalVar) and op.op.name_hint in self.names:
            args = [self.visit_expr(arg) for arg in op.args]
            return relax.Call(relax.ExternFunc(op.op.name_hint), args, op.attrs, [op.ty], op.span)
        return super().visit_call_(op)


@tvm.transform.module_pass(opt_level=0, name="BuildKernels")
class BuildKernels:
    """Build the module's PrimFuncs and link them as an external library (module docstring).

    ``store`` holds the lowerings the guard's check made (:class:`LoweredStore`). A module whose host
    is WebAssembly (a system library, which TVM registers differently) is left for ``tvm.compile``.
    After the pass has run, :attr:`reused` names the kernels whose check lowering was kept.
    """

    def __init__(self, target: Target, store: Optional[LoweredStore] = None):
        self.target = Target(target)
        self.store = store
        self.reused: List[str] = []

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        kernels = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
        if not kernels or "wasm" in str(host_target(self.target).attrs.get("mtriple", "")) \
                or mod.get_attr("system_lib_prefix") is not None:
            return mod
        lowered, fresh = [], {}
        self.reused = []
        for name, func in kernels.items():
            kept = self.store.take(name, func, self.target) if self.store is not None else None
            if kept is None:
                fresh[name] = func
            else:
                lowered.append(kept)
                self.reused.append(name)
        parts = parts_of(list(fresh.items()), build_workers())
        lowered += in_parallel(lambda part: lower(dict(part), self.target), parts) if fresh else []
        library = codegen(lowered, self.target)
        rewriter = _KernelsToLibrary(mod, set(kernels))
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        out = rewriter.builder_.get()
        for gv in [gv for gv, f in out.functions_items() if isinstance(f, tirx.PrimFunc)]:
            del out[gv]
        return out.with_attr("external_mods", list(mod.get_attr("external_mods") or []) + [library])
