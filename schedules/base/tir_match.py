"""TIR matching helpers shared by the rules that recognise a pattern from the TIR."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.ir import TensorLoad
from tvm.s_tir.dlight.analysis import get_root_block


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


def single_reduction(sch: s_tir.Schedule):
    """``(root, blocks, reduction)``: the root block, its child blocks and the one reduction block
    among them; None without a root block or with another number of reductions."""
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    blocks = sch.get_child_blocks(root)
    reductions = [b for b in blocks if is_reduction(sch.get(b))]
    return (root, blocks, reductions[0]) if len(reductions) == 1 else None


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
