"""What a prologue costs a kernel: element-wise producers computed inside its operand loads.

A kernel that stages an operand (a GEMM's A tile in shared memory) copies each element once per
block that reads it. When element-wise producers of that operand are fused into the kernel (an
SE block's channel scale before the projecting 1x1 conv), every copy computes them instead: a
few more loads (the scale, from cache) and arithmetic instructions an element, and the copy is no
longer a plain copy (``cp.async`` cannot do it). :func:`operand_instructions` counts that work
on a fused PrimFunc, :func:`func_instructions` on the producers' PrimFuncs before fusion, the
same way, so that a plan made before fusion and the schedule made after it agree.
"""

from __future__ import annotations

from typing import Iterable, Tuple

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.ir import TensorLoad
from tvm.s_tir.dlight.analysis import get_root_block

from .tir_match import is_reduction


def value_instructions(value: tirx.PrimExpr) -> int:
    """Instructions one stored element costs beyond a copy: arithmetic and every load after the
    first (index arithmetic not counted). 0 for a copy: a load, or a load or a constant chosen by
    a guard (a padding block)."""
    loads, ops = _count(value)
    return ops + max(loads - 1, 0)


def _count(expr) -> Tuple[int, int]:
    """``(loads, arithmetic ops)`` of ``expr``, not descending into load indices or guards."""
    if isinstance(expr, TensorLoad):
        return 1, 0
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm, tirx.Var)):
        return 0, 0
    if isinstance(expr, tirx.Cast):
        return _count(expr.value)
    if isinstance(expr, tirx.Select):
        return _guarded(expr.true_value, expr.false_value)
    if isinstance(expr, ir.Call):
        name = getattr(expr.op, "name", "")
        if name.endswith("if_then_else"):
            return _guarded(expr.args[1], expr.args[2])
        counts = [_count(a) for a in expr.args]
        return sum(c[0] for c in counts), 1 + sum(c[1] for c in counts)
    if hasattr(expr, "a") and hasattr(expr, "b"):  # a binary operation
        (la, oa), (lb, ob) = _count(expr.a), _count(expr.b)
        return la + lb, 1 + oa + ob
    return 0, 1


def _guarded(then, otherwise) -> Tuple[int, int]:
    """A guard's two branches: only one is taken, so the larger counts (the guard is index math)."""
    return max(_count(then), _count(otherwise))


def _stored_values(blocks: Iterable[s_tir.SBlock]):
    for block in blocks:
        if isinstance(block.body, tirx.BufferStore):
            yield block.body.value


def _spatial_blocks(func: tirx.PrimFunc):
    found = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, found.append), order="post")
    return [b for b in found if b.iter_vars and not is_reduction(b)]


def selects_among_inputs(func: tirx.PrimFunc) -> bool:
    """Whether an element of ``func``'s output is chosen among several inputs by guards (a
    concatenation): a guard whose two sides both load. A padding guard (data or a constant) is
    not; computed inside a reader's loads the choice is a chain of compares an element that
    :func:`value_instructions` does not count (it counts a guard as index math)."""
    def both_sides_load(expr) -> bool:
        if isinstance(expr, tirx.Select):
            sides = (expr.true_value, expr.false_value)
        elif getattr(getattr(expr, "op", None), "name", "").endswith("if_then_else"):
            sides = (expr.args[1], expr.args[2])
        else:
            return False
        return all(_count(side)[0] > 0 for side in sides)

    found = []
    for value in _stored_values(_spatial_blocks(func)):
        tvm_ffi.structural_walk(value, [(tirx.Select, found.append), (ir.Call, found.append)], order="post")
    return any(both_sides_load(e) for e in found)


def func_instructions(func: tirx.PrimFunc) -> int:
    """Instructions an element of an element-wise PrimFunc's output costs beyond a copy, summed
    over its spatial blocks (each inlined into the reader's loads after fusion; reductions are
    not a prologue's work)."""
    return sum(value_instructions(v) for v in _stored_values(_spatial_blocks(func)))


def operand_instructions(sch: s_tir.Schedule, block, read: int) -> int:
    """Instructions an element of ``block``'s operand ``read`` costs beyond a copy: the work of
    every block that produces it, up to the PrimFunc's parameters."""
    blocks = [sch.get(b) for b in sch.get_child_blocks(get_root_block(sch))]
    total, frontier, seen = 0, [sch.get(block).reads[read].source], set()
    while frontier:
        wanted = frontier.pop()
        for stmt in blocks:
            if not any(w.source.same_as(wanted) for w in stmt.writes) or stmt.name_hint in seen:
                continue
            seen.add(stmt.name_hint)
            if isinstance(stmt.body, tirx.BufferStore):
                total += value_instructions(stmt.body.value)
            frontier.extend(r.source for r in stmt.reads)
    return total

