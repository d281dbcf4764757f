"""Where a built executable's GPU kernels are, and how its host code launches them.

:func:`device_modules` lists the CUDA and ROCm modules in ``tvm.compile``'s import tree;
:func:`launches` gives each kernel's :class:`Launch`. Grid and block extents and the dynamic shared
memory size are launch arguments, not part of the kernel. They are read from the host module: the
launch-parameter tags of each kernel from the device module's serialized function table, and their
values from the constants the host code stores into the argument array of each kernel call (LLVM
IR). Where a value is not a constant (dynamic shapes) it stays unknown (``None``).
:mod:`.kernel_resources` puts them beside what the compiler reports of each kernel.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

CUDA_KINDS = ("cuda",)
ROCM_KINDS = ("hip", "rocm")


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


# ---- launch configuration from the host -------------------------------------------------------
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
