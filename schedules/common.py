"""Helpers shared by the schedule rules: the GPU limits a rule sizes its tiles against.

A rule reads the hardware from the profile the target carries (:func:`tvm_fusion_hw.profile_of`);
a target made without one (a plain ``{"kind": "cuda", "arch": "sm_80"}``) falls back to the
target's own attributes and to conservative defaults for what a target cannot say (SM count,
resident threads per SM).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.ir import TensorLoad
from tvm.runtime import DataType
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.target import Target

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.target import profile_of

#: CUDA caps a block's *static* ``__shared__`` arrays at 48 KiB whatever the opt-in limit is; TVM's
#: ``shared`` scope is allocated statically (``shared.dyn`` would need the opt-in attribute).
CUDA_STATIC_SHARED_MEMORY_BYTES = 48 * 1024

#: Used when a target carries no profile. A mid-size GPU: its grid-fill estimates err towards
#: "enough blocks", which only costs some tail effect on a larger GPU.
_FALLBACK_MULTIPROCESSORS = 80
_FALLBACK_THREADS_PER_MULTIPROCESSOR = 2048
_FALLBACK_BLOCKS_PER_MULTIPROCESSOR = 32
_FALLBACK_REGISTERS_PER_MULTIPROCESSOR = 65536
_FALLBACK_MAX_REGISTERS_PER_THREAD = 255
_FALLBACK_DRAM_BYTES_PER_S = 2.0e12
_FALLBACK_FP32_FLOP_PER_S = 20e12


@dataclasses.dataclass(frozen=True)
class GPULimits:  # pylint: disable=too-many-instance-attributes
    """What one block and one multiprocessor (SM or CU) may use on the target.

    ``from_profile`` says whether the figures come from a hardware profile (True) or from the
    target's attributes and defaults (False).
    """

    kind: str
    warp_size: int
    max_threads_per_block: int
    shared_memory_bytes_per_block: int
    shared_memory_bytes_per_multiprocessor: int
    shared_memory_reserved_bytes_per_block: int
    multiprocessor_count: int
    max_threads_per_multiprocessor: int
    max_blocks_per_multiprocessor: int
    registers_per_multiprocessor: int
    max_registers_per_thread: int
    dram_bytes_per_s: float
    warp_instructions_per_s: float  # instruction issue rate of the whole GPU, in warp instructions
    from_profile: bool

    @property
    def resident_threads(self) -> int:
        """Threads the whole GPU keeps resident at full occupancy."""
        return self.multiprocessor_count * self.max_threads_per_multiprocessor


def _attr(target: Target, name: str, default: int) -> int:
    value = target.attrs.get(name, None)
    return int(value) if value is not None else default


def gpu_limits(target: Target) -> GPULimits:
    """The limits of ``target``: from its hardware profile, else from its attributes.

    Parameters
    ----------
    target : tvm.target.Target
        A cuda or rocm target, preferably made by :func:`tvm_fusion_hw.target`.

    Returns
    -------
    limits : GPULimits
        Shared memory per block is capped at what TVM's static ``shared`` scope may use
        (48 KiB on CUDA).
    """
    kind = target.kind.name
    static_cap = CUDA_STATIC_SHARED_MEMORY_BYTES if kind == "cuda" else 1 << 30
    try:
        profile = profile_of(target)
    except FusionHWError:
        profile = None
    if profile is not None:
        return GPULimits(
            kind=kind,
            warp_size=profile.warp_size,
            max_threads_per_block=profile.max_threads_per_block,
            shared_memory_bytes_per_block=min(profile.shared_memory_bytes_per_block, static_cap),
            shared_memory_bytes_per_multiprocessor=profile.shared_memory_bytes_per_multiprocessor,
            shared_memory_reserved_bytes_per_block=profile.shared_memory_reserved_bytes_per_block,
            multiprocessor_count=profile.multiprocessor_count,
            max_threads_per_multiprocessor=profile.max_threads_per_multiprocessor,
            max_blocks_per_multiprocessor=profile.max_blocks_per_multiprocessor,
            registers_per_multiprocessor=profile.registers_per_multiprocessor,
            max_registers_per_thread=profile.max_registers_per_thread,
            dram_bytes_per_s=profile.dram_bytes_per_s,
            # One FP32 FMA (2 FLOP) per lane per issued instruction at peak.
            warp_instructions_per_s=profile.peak_fp32_flop_per_s / (2 * profile.warp_size),
            from_profile=True,
        )
    warp = _attr(target, "thread_warp_size", 64 if kind == "rocm" else 32)
    smem = _attr(target, "max_shared_memory_per_block", 65536 if kind == "rocm" else 49152)
    threads = _attr(target, "max_threads_per_block", _attr(target, "max_num_threads", 1024))
    return GPULimits(
        kind=kind,
        warp_size=warp,
        max_threads_per_block=threads,
        shared_memory_bytes_per_block=min(smem, static_cap),
        shared_memory_bytes_per_multiprocessor=smem,
        shared_memory_reserved_bytes_per_block=0,
        multiprocessor_count=_FALLBACK_MULTIPROCESSORS,
        max_threads_per_multiprocessor=_FALLBACK_THREADS_PER_MULTIPROCESSOR,
        max_blocks_per_multiprocessor=_FALLBACK_BLOCKS_PER_MULTIPROCESSOR,
        registers_per_multiprocessor=_attr(
            target, "registers_per_block", _FALLBACK_REGISTERS_PER_MULTIPROCESSOR
        ),
        max_registers_per_thread=_FALLBACK_MAX_REGISTERS_PER_THREAD,
        dram_bytes_per_s=_FALLBACK_DRAM_BYTES_PER_S,
        warp_instructions_per_s=_FALLBACK_FP32_FLOP_PER_S / (2 * warp),
        from_profile=False,
    )


def allocated_shared_bytes(func: tirx.PrimFunc) -> int:
    """Shared memory ``func`` (scheduled) allocates once TVM has compacted its buffers.

    A rule plans its shared tiles, but the allocation is what ``CompactBufferAllocation`` can
    prove about the accessed region. Where a guard on an edge tile defeats that proof it keeps a
    larger region (seen: a 16-channel 11-row tile of a 30-row padded input compacted to 31 rows,
    2.8x the plan), so rules compare this figure with their plan before accepting a schedule.
    """
    mod = tvm.IRModule({"main": func})
    mod = tvm.s_tir.transform.PlanAndUpdateBufferAllocationLocation()(mod)
    mod = tvm.s_tir.transform.ConvertBlocksToOpaque()(mod)
    mod = tvm.s_tir.transform.CompactBufferAllocation()(mod)
    total = 0

    def visit(block: s_tir.SBlock) -> None:
        nonlocal total
        for buf in block.alloc_buffers:
            if buf.scope() in ("shared", "shared.dyn"):
                elems = 1
                for dim in buf.shape:
                    elems *= int(dim)
                total += elems * max(1, DataType(str(buf.dtype)).bits // 8)

    tvm_ffi.structural_walk(mod["main"], [(s_tir.SBlock, visit)], order="post")
    return total


# ---- TIR matching helpers (shared by rules that recognise a pattern from the TIR) -------------
def is_reduction(block: s_tir.SBlock) -> bool:
    """Whether ``block`` has a reduction iterator."""
    return any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars)


def reduction_pair(sch: s_tir.Schedule):
    """``(root, producer, consumer)``: the root block of a fused complex pair and the two reduction
    blocks directly under it, in order; None without a root block or with another number of
    reductions."""
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    reductions = [b for b in sch.get_child_blocks(root) if is_reduction(sch.get(b))]
    return (root, *reductions) if len(reductions) == 2 else None


def is_plain_spatial(block: s_tir.SBlock, written: tirx.Buffer) -> bool:
    """All iterators spatial, and the block writes ``written[v0, v1, ...]`` in iterator order."""
    if any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars):
        return False
    store = block.body
    if not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(written):
        return False
    ivars = [iv.var for iv in block.iter_vars]
    return len(store.indices) == len(ivars) and all(
        isinstance(i, tirx.Var) and i.same_as(v) for i, v in zip(store.indices, ivars)
    )


def strip_cast(expr: tirx.Expr) -> tirx.Expr:
    """``expr`` without the casts around it."""
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return expr


def const_int(expr) -> Optional[int]:
    """The value of an integer constant, else None."""
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


def var_position(expr: tirx.Expr, variables: Sequence[tirx.Var]) -> Optional[int]:
    """Position of ``expr`` in ``variables`` if it is one of them, else None."""
    if not isinstance(expr, tirx.Var):
        return None
    return next((i for i, v in enumerate(variables) if v.same_as(expr)), None)


def linear_coefficients(expr: tirx.Expr, variables: Sequence[tirx.Var]) -> Optional[List[int]]:
    """Integer coefficients of ``expr`` in ``variables`` then its constant, or None."""
    coeffs = sym.detect_linear_equation(expr, list(variables))
    if len(coeffs) != len(variables) + 1:
        return None
    values = [const_int(c) for c in coeffs]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def only_coefficients(coeffs: Optional[List[int]], allowed: Dict[int, Optional[int]]) -> bool:
    """Zero constant; coefficient ``allowed[i]`` (None: any) at positions in ``allowed``, else 0."""
    if coeffs is None or coeffs[-1] != 0:
        return False
    return all(
        (allowed[i] is None or coef == allowed[i]) if i in allowed else coef == 0
        for i, coef in enumerate(coeffs[:-1])
    )


def trivially_bound(sch: s_tir.Schedule, block_rv: s_tir.schedule.SBlockRV) -> bool:
    """Each loop above the block is one of its iterators, in order, with a static extent."""
    block = sch.get(block_rv)
    loops = sch.get_loops(block_rv)
    if not loops or len(loops) != len(block.iter_vars):
        return False
    realize = sch.get(loops[-1]).body
    if not isinstance(realize, s_tir.SBlockRealize):
        return False
    return all(
        value.same_as(sch.get(loop).loop_var) and const_int(iv.dom.extent) is not None
        for loop, value, iv in zip(loops, realize.iter_values, block.iter_vars)
    )


def padding_producer(sch: s_tir.Schedule, block, data: tirx.Buffer, weight: tirx.Buffer):
    """``(True, pad)`` when ``block``'s ``data`` comes from at most one plain spatial block (``pad``,
    the padding; None if there is none) and its ``weight`` from no block; ``(False, None)`` else."""
    pad = None
    for producer in sch.get_producers(block):
        written = [r.source for r in sch.get(producer).writes]
        if any(b.same_as(weight) for b in written):
            return False, None
        if any(b.same_as(data) for b in written):
            if not is_plain_spatial(sch.get(producer), data):
                return False, None
            pad = producer
    return True, pad


def inline_all_but(sch: s_tir.Schedule, root, keep: Sequence) -> list:
    """Inline every child block of ``root`` but ``keep`` into its consumer, until none more goes
    (prologues into the padding, constants and parameter reshapes into the epilogue, epilogue
    steps into the last one); return the blocks left besides ``keep``."""

    def kept(block) -> bool:
        return any(sch.get(block).same_as(sch.get(k)) for k in keep)

    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root):
            if kept(block):
                continue
            try:
                sch.compute_inline(block)
                changed = True
            except RuntimeError:  # ScheduleError: not inlinable
                continue
    return [b for b in sch.get_child_blocks(root) if not kept(b)]


def mac_operands(block: s_tir.SBlock, ndim: int = 4) -> Optional[List[TensorLoad]]:
    """The two ``ndim``-D loads of ``out[...] = out[...] + A[...] * B[...]`` (casts allowed)."""
    store = block.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add):
        return None
    for acc, term in ((store.value.a, store.value.b), (store.value.b, store.value.a)):
        if isinstance(acc, TensorLoad) and acc.source.same_as(store.buffer):
            term = strip_cast(term)
            if not isinstance(term, tirx.Mul):
                return None
            loads = [strip_cast(term.a), strip_cast(term.b)]
            if all(isinstance(x, TensorLoad) and len(x.indices) == ndim for x in loads):
                return loads
            return None
    return None


def tensor_loads(expr) -> List[TensorLoad]:
    """Every buffer load in ``expr`` (or a statement), in post-order."""
    found: List[TensorLoad] = []
    tvm_ffi.structural_walk(expr, [(TensorLoad, found.append)], order="post")
    return found


# ---- the shape every tiled rule here shares ----------------------------------------------------
class TiledScheduleRule(GPUScheduleRule):
    """A rule that matches its pattern in the TIR, ranks tiles on the target's hardware profile,
    and schedules the best tile whose shared buffers TVM compacts to the planned size.

    Subclasses give three functions (as static methods) and a ``Config`` with ``max_attempts``:
    ``match(sch, config) -> (problem, *blocks) | None`` (inlining what surrounds the pattern),
    ``rank(problem, limits, config) -> [tile]`` (best first, each with ``shared_bytes``) and
    ``schedule(sch, problem, tile, *blocks)``.
    """

    match = rank = schedule = None  # set by subclasses

    def apply(self, func: tirx.PrimFunc, target: Target, _: bool) -> Optional[s_tir.Schedule]:
        planned = self.schedule_best(func, target)
        return None if planned is None else planned[2]

    def plan(self, func: tirx.PrimFunc, target: Target):
        """The problem the rule sees in ``func`` and the tile it uses, or ``None``."""
        planned = self.schedule_best(func, target)
        return None if planned is None else planned[:2]

    def schedule_tile(self, func: tirx.PrimFunc, target: Target, tile) -> Optional[s_tir.Schedule]:
        """``func`` scheduled with a given ``tile`` (one of ``rank``'s, or made by hand); None when
        ``func`` is not this rule's pattern or the tile fails."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        matched = self.match(sch, self.get_config(target))
        if matched is None:
            return None
        problem, *blocks = matched
        try:
            self.schedule(sch, problem, tile, *blocks)
        except RuntimeError:  # ScheduleError, InternalError
            return None
        return sch

    def schedule_best(self, func: tirx.PrimFunc, target: Target):
        """(problem, tile, schedule) for ``func``, or None when it is not this rule's pattern."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        config = self.get_config(target)
        limits = gpu_limits(target)

        # Step 1. Match the pattern and inline what surrounds it.
        matched_sch = s_tir.Schedule(func)
        matched = self.match(matched_sch, config)
        if matched is None:
            return None
        problem, *blocks = matched

        # Step 2. Rank the tiles on the hardware profile.
        tiles = self.rank(problem, limits, config)

        # Step 3. Schedule the best tile whose shared buffers TVM compacts to the planned size
        # (a tile that does not divide the output can compact to far more); failing that, the
        # first whose compacted buffers still fit a block. Each attempt starts from a copy of the
        # matched schedule (its block handles stay valid in the copy).
        fallback = None
        for tile in tiles[: config.max_attempts]:
            sch = matched_sch.copy()
            try:
                self.schedule(sch, problem, tile, *blocks)
                allocated = allocated_shared_bytes(sch.mod["main"])
            except RuntimeError:  # ScheduleError, or an InternalError of a TVM pass
                continue
            if allocated <= tile.shared_bytes:
                return problem, tile, sch
            if fallback is None and allocated <= limits.shared_memory_bytes_per_block:
                fallback = (problem, dataclasses.replace(tile, shared_bytes=allocated), sch)
        return fallback


def with_min_blocks_per_multiprocessor(sch: s_tir.Schedule, blocks: int) -> s_tir.Schedule:
    """``sch``'s function with the blocks a multiprocessor must hold set to ``blocks``
    (``__launch_bounds__(threads, blocks)`` on CUDA), e.g. a tile's modelled residency.

    Without it ptxas (sm_90, nvcc 13) may squeeze a kernel a step below its registers for one more
    resident block and spill (seen on DepthwisePointwise: 40 registers needed, 32 used with 8 bytes
    spilled; on ImplicitGemm's 256-thread prefetching vector tiles: 64 used, 12 bytes spilled, 80
    without a spill at 3 blocks); given the residency it fits the registers to it instead.
    """

    def post(loop: tirx.For) -> tirx.For:
        binding = loop.thread_binding
        if loop.kind != tirx.ForKind.THREAD_BINDING or binding is None or binding.thread_tag != "blockIdx.x":
            return loop
        body = tirx.AttrStmt(loop.loop_var, "tirx.launch_bounds_min_blocks_per_sm",
                             tirx.IntImm("int32", blocks), loop.body)
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, binding, loop.annotations)

    return s_tir.Schedule(tvm_ffi.structural_map(sch.mod["main"], (tirx.For, post)))
