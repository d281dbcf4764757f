"""What TVM actually allocates for a scheduled PrimFunc, checked against a rule's plan."""

from __future__ import annotations

import math

import tvm
import tvm_ffi

from tvm import s_tir, tirx
from tvm.runtime import DataType
from tvm.target import Target

from .limits import GPULimits


def allocated_shared_bytes(func: tirx.PrimFunc) -> int:
    """Shared memory ``func`` (scheduled) allocates once TVM has compacted its buffers.

    A rule plans its shared tiles, but the allocation is what ``CompactBufferAllocation`` can
    prove about the accessed region. Where a guard on an edge tile defeats that proof it keeps a
    larger region (seen: a 16-channel 11-row tile of a 30-row padded input compacted to 31 rows,
    2.8x the plan), so rules compare this figure with their plan before accepting a schedule.
    """
    mod = tvm.IRModule({"main": func})
    mod = tvm.s_tir.transform.LowerInitBlock()(mod)  # the build's first passes, in its order
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


def merged_dynamic_shared_bytes(func: tirx.PrimFunc, limits: GPULimits) -> int:
    """Bytes of the one ``shared.dyn`` allocation the kernel of ``func`` (scheduled) gets once TVM
    has lowered it and merged its dynamic shared buffers."""
    target = Target(dict(limits.profile.target))
    mod = tvm.IRModule({"k": func.with_attr("global_symbol", "k")})
    mod = tvm.tirx.transform.BindTarget(Target(target, Target({"kind": "llvm"})))(mod)
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    total = 0

    def visit(stmt: tirx.AllocBuffer) -> None:
        nonlocal total
        if stmt.buffer.scope() == "shared.dyn":
            elems = math.prod(int(x) for x in stmt.buffer.shape)
            total += elems * max(1, DataType(str(stmt.buffer.dtype)).bits // 8)

    for _, kernel in pipeline(mod).functions_items():
        tvm_ffi.structural_walk(kernel.body, [(tirx.AllocBuffer, visit)], order="post")
    return total
