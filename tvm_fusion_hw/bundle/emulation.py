"""Another GPU's limits emulated on the bundle's GPU: the build side of the proof of issue 15.

A bundle variant with ``fusion_profile=P`` fuses as profile P decides; with ``limits=P`` it is
built for the bundle's GPU (the H200) with P's per-block and per-SM limits:

* a *limits profile*: the bundle profile with P's :data:`LIMIT_FIELDS` (shared memory per block
  and per SM, threads per block and per SM, blocks per SM, register file, registers per thread),
  and the bundle GPU's own throughput figures (SM count, DRAM bandwidth, peaks, L2: what the
  kernels run on). Its target (``hardware.target``) carries P's ``max_shared_memory_per_block``,
  ``max_threads_per_block`` and ``registers_per_block``, and its tag names the limits profile, so
  the schedule templates size tiles, occupancy and ``__launch_bounds__(threads, blocks)`` against
  P's limits. Where P's limits equal the bundle GPU's, the bundle profile itself is used.
* a register cap per kernel (:class:`RegisterCap`, on the scheduled kernels before they are built): P's register file over
  the kernel's block times the blocks per SM its launch bounds plan, rounded down to P's
  allocation unit, at most P's registers per thread (and ``max_registers``). Where that is below
  what ptxas would allow the kernel on the bundle's GPU from its launch bounds, the kernel gets
  ``tirx.max_registers`` (TVM 0.27 writes ``__maxnreg__(N)`` in place of ``__launch_bounds__``;
  any compile path honours it, NVRTC or nvcc, the bundle's cubins or the runner's own compile).

Not emulated: an upper bound on residency (the bundle's GPU may hold more threads and blocks per
SM than P; launch bounds set a floor, not a ceiling), the SM count, bandwidth, clocks and caches.
:func:`feasibility` says whether every built kernel fits P (ptxas registers and shared memory).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import tvm
import tvm_ffi
from tvm import tirx

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.occupancy import occupancy
from tvm_fusion_hw.hardware.profile import HardwareProfile, load_profile, load_profile_file
from tvm_fusion_hw.hardware.target import target as hw_target

#: The figures of P a ``limits=P`` build takes; the rest stay the bundle GPU's.
LIMIT_FIELDS = ("register_file_bytes_per_multiprocessor", "max_registers_per_thread",
                "register_allocation_granularity", "shared_memory_bytes_per_multiprocessor",
                "shared_memory_bytes_per_block", "shared_memory_reserved_bytes_per_block",
                "max_threads_per_block", "max_threads_per_multiprocessor", "max_blocks_per_multiprocessor")
MAX_REGISTERS_ATTR = "tirx.max_registers"
MIN_BLOCKS_ATTR = "tirx.launch_bounds_min_blocks_per_sm"
_PROFILE_DIR: Optional[Path] = None


def check_emulation_profile(name: str, key: str) -> str:
    """``name`` if it is an NVIDIA profile (the runner runs CUDA), else an error."""
    profile = load_profile(name)
    if profile.tvm_kind != "cuda":
        raise FusionHWError(f"{key}={name}: only NVIDIA profiles can be emulated on the bundle's "
                            f"CUDA GPU ('{profile.name}' is {profile.tvm_kind}: wavefront {profile.warp_size})")
    return profile.name


def limits_profile(base: str, limits: str) -> HardwareProfile:
    """The ``base`` profile with ``limits``' :data:`LIMIT_FIELDS` (``base`` itself where equal),
    registered under ``<base>--limits-<limits>`` so that its target maps back to it."""
    global _PROFILE_DIR  # pylint: disable=global-statement
    home, other = load_profile(base), load_profile(limits)
    if all(getattr(home, f) == getattr(other, f) for f in LIMIT_FIELDS):
        return home
    name = f"{home.name}--limits-{other.name}"
    data = dataclasses.asdict(home)
    data.update({f: getattr(other, f) for f in LIMIT_FIELDS}, name=name,
                display_name=f"{home.display_name} with the limits of {other.display_name}")
    data["sources"] = {**home.sources, **{f: f"{other.name}: {other.sources[f]}" for f in LIMIT_FIELDS}}
    if _PROFILE_DIR is None:
        _PROFILE_DIR = Path(tempfile.mkdtemp(prefix="tvm_fusion_hw_limits_"))
    path = _PROFILE_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return load_profile_file(path)


def emulated_build(knobs: Dict[str, object], tgt: tvm.target.Target, profile: str
                   ) -> Tuple[tvm.target.Target, str, Optional[HardwareProfile]]:
    """``(target, fusion profile, limits profile or None)`` of a variant's emulation ``knobs``
    on the bundle's ``tgt`` and ``profile``."""
    fusion = str(knobs.get("fusion_profile") or profile)
    if knobs.get("limits") is None:
        return tgt, fusion, None
    if tgt.kind.name != "cuda":
        raise FusionHWError("limits=P needs the bundle's --target cuda")
    emulated = limits_profile(profile, str(knobs["limits"]))
    return hw_target(emulated), fusion, load_profile(str(knobs["limits"]))


# ---- the register cap ---------------------------------------------------------------------
def _int(value) -> Optional[int]:
    return int(value.value) if isinstance(value, tirx.IntImm) else None


def _threads(body) -> Optional[int]:
    """Threads per block of one kernel: the product of its threadIdx extents (None if dynamic)."""
    extents: Dict[str, int] = {}
    dynamic = []

    def visit(loop: tirx.For) -> tirx.For:
        binding = loop.thread_binding
        if loop.kind == tirx.ForKind.THREAD_BINDING and binding is not None \
                and binding.thread_tag.startswith("threadIdx."):
            ext = _int(loop.extent)
            if ext is None:
                dynamic.append(binding.thread_tag)
            else:
                extents[binding.thread_tag] = max(ext, extents.get(binding.thread_tag, 1))
        return loop

    tvm_ffi.structural_map(body, (tirx.For, visit))
    if dynamic:
        return None
    threads = 1
    for ext in extents.values():
        threads *= ext
    return threads


def _min_blocks(body) -> int:
    """The blocks per SM the kernel's launch bounds ask for (1 without)."""
    found = []

    def visit(attr: tirx.AttrStmt) -> tirx.AttrStmt:
        if attr.attr_key == MIN_BLOCKS_ATTR and _int(attr.value):
            found.append(_int(attr.value))
        return attr

    tvm_ffi.structural_map(body, (tirx.AttrStmt, visit))
    return max(found) if found else 1


def register_limit(profile: HardwareProfile, threads: int, blocks: int) -> int:
    """Registers per thread that let ``blocks`` blocks of ``threads`` threads share ``profile``'s
    register file (warps rounded up, down to the allocation unit), at most its per-thread limit."""
    warp, unit = profile.warp_size, profile.register_allocation_granularity
    lanes = -(-threads // warp) * warp * max(1, blocks)
    return max(unit, min(profile.max_registers_per_thread,
                         profile.registers_per_multiprocessor // lanes // unit * unit))


@tvm.transform.module_pass(opt_level=0, name="EmulatedRegisterCap")
class RegisterCap:
    """Give each kernel ``tirx.max_registers`` where ``limits`` (or ``max_registers``) allows it
    fewer registers per thread than ptxas would on ``home`` from its launch bounds. ``caps``: the
    cap set per kernel (``{primfunc: [registers, threads, blocks]}``) once it ran."""

    def __init__(self, home: HardwareProfile, limits: Optional[HardwareProfile], max_registers: int = 0):
        self.home, self.limits, self.max_registers = home, limits, int(max_registers or 0)
        self.caps: Dict[str, List[int]] = {}

    def _cap(self, name: str, loop: tirx.For) -> tirx.For:
        threads, blocks = _threads(loop.body), _min_blocks(loop.body)
        if threads is None:
            return loop
        want = register_limit(self.limits, threads, blocks) if self.limits is not None else 255
        if self.max_registers:
            want = min(want, self.max_registers)
        if want >= register_limit(self.home, threads, blocks):
            return loop  # ptxas allows no more than this from the launch bounds anyway
        self.caps[name] = [want, threads, blocks]
        body = tirx.AttrStmt(loop.loop_var, MAX_REGISTERS_ATTR, tirx.IntImm("int32", want), loop.body)
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding,
                        loop.annotations)

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        out = {}
        for gvar, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc):
                continue
            name = gvar.name_hint

            def post(loop: tirx.For, name=name) -> tirx.For:
                binding = loop.thread_binding
                if loop.kind == tirx.ForKind.THREAD_BINDING and binding is not None \
                        and binding.thread_tag == "blockIdx.x":
                    return self._cap(name, loop)
                return loop

            new = tvm_ffi.structural_map(func, (tirx.For, post))
            if not new.same_as(func):
                out[gvar] = new
        for gvar, func in out.items():
            mod[gvar] = func
        return mod


def register_cap(knobs: Dict[str, object], profile: str, limits: Optional[HardwareProfile]) -> Optional[RegisterCap]:
    """The :class:`RegisterCap` a variant's ``knobs`` ask for (``profile``: the bundle's GPU), to run
    on the scheduled kernels before they are built (``get_pipeline(before_build=...)``); None where
    they set neither ``limits`` nor ``max_registers``."""
    if limits is None and not knobs.get("max_registers"):
        return None
    return RegisterCap(load_profile(profile), limits, int(knobs.get("max_registers") or 0))


# ---- what was built -----------------------------------------------------------------------
def source_bounds(cuda_source: str) -> Dict[str, str]:
    """``{kernel: "__maxnreg__(N)" | "__launch_bounds__(T, B)" | ""}`` as the CUDA source says."""
    out = {}
    for match in re.finditer(r"__global__\s+void\s+((?:__(?:launch_bounds|maxnreg)__\([^)]*\)\s+)?)(\w+)\s*\(",
                             cuda_source):
        out[match.group(2)] = match.group(1).strip()
    return out


def main_launches(executable, cuda_source: Optional[str]) -> List[str]:
    """CUDA kernels one run of ``main`` launches, in order (VM calls of ``main``, each PrimFunc's
    kernels ``<name>_kernel``, ``<name>_kernel_1``, ... in source order): what an ncu CSV of the
    run lists, to find each library's runs in it (``bench/emulated_limits.py report``)."""
    if not cuda_source:
        return []
    kernels = list(source_bounds(cuda_source))
    text = executable.as_text() if hasattr(executable, "as_text") else ""
    main = text.split("@main:", 1)[-1].split("\n@", 1)[0] if "@main:" in text else text
    calls = re.findall(r"call\s+(\w+)\s+in:", main) or re.findall(r"call\s+(\w+)", main)
    out = []
    for func in calls:
        out += [k for k in kernels if k == f"{func}_kernel" or re.fullmatch(rf"{re.escape(func)}_kernel_\d+", k)]
    return out


def feasibility(executable, tgt: tvm.target.Target, limits: HardwareProfile) -> Dict[str, object]:
    """Whether every kernel of ``executable`` (ptxas here: registers, static + launch shared memory,
    block size) can run on ``limits``' GPU: ``{"feasible", "problems", "kernels": {name: [regs,
    shared bytes, threads, spill bytes]}, "compiler"}``. Needs nvcc (or NVRTC)."""
    from tvm_fusion_hw.feedback.kernel_resources import measure  # pylint: disable=import-outside-toplevel

    kernels = measure(executable, tgt)
    if not kernels:
        return {"feasible": None, "problems": ["no ptxas here: not checked"], "kernels": {}}
    problems = []
    for k in kernels:
        threads = k.threads_per_block or k.max_threads_per_block or 0
        smem = k.shared_bytes if k.dynamic_shared_bytes is not None else k.static_shared_bytes
        if threads > limits.max_threads_per_block:
            problems.append(f"{k.name}: {threads} threads/block > {limits.max_threads_per_block}")
        if smem > limits.shared_memory_bytes_per_block:
            problems.append(f"{k.name}: {smem} B shared/block > {limits.shared_memory_bytes_per_block}")
        if k.registers > limits.max_registers_per_thread:
            problems.append(f"{k.name}: {k.registers} registers/thread > {limits.max_registers_per_thread}")
        elif threads and occupancy(limits, threads, k.registers, smem).blocks_per_multiprocessor == 0:
            problems.append(f"{k.name}: one block ({threads} threads x {k.registers} registers, "
                            f"{smem} B shared) does not fit an SM of {limits.name}")
    return {"feasible": not problems, "problems": problems, "compiler": kernels[0].compiler,
            "kernels": {k.name: [k.registers, k.shared_bytes, k.threads_per_block,
                                 k.spill_store_bytes + k.spill_load_bytes] for k in kernels}}


def emulation_facts(executable, tgt: tvm.target.Target, knobs: Dict[str, object], pipeline,
                    limits: Optional[HardwareProfile], cuda_source: Optional[str],
                    cap: Optional[RegisterCap] = None) -> Dict[str, object]:
    """What a variant's manifest entry records of its emulation: the knobs, the build target, the
    register caps set, the pairs the pipeline had to stage (the plan as decided could not be
    scheduled under these limits), each kernel's bounds in the source, and :func:`feasibility`."""
    fuse = getattr(pipeline, "fuse_pass", None)
    refused = [f"{'+'.join(r.producer_ops)} -> {'+'.join(r.consumer_ops)}: {r.reason}"
               for r in (fuse.config.refused_pairs if fuse is not None else ())]
    log = getattr(getattr(pipeline, "schedule_pass", None), "log", None)
    facts = {"knobs": dict(knobs), "target": str(tgt), "limits_profile": str(tgt.tag or ""),
             "fusion_profile": fuse.profile.name if fuse is not None else None,
             "register_caps": dict(cap.caps) if cap is not None else {},
             "restaged_pairs": refused,
             "template_fallbacks": len(log.fallbacks) if log is not None else None,
             "bounds": source_bounds(cuda_source or "")}
    if limits is not None:
        facts.update(feasibility(executable, tgt, limits))
        if refused:
            facts["feasible"] = False
            facts.setdefault("problems", []).extend(f"restaged: {r}" for r in refused)
    return facts
