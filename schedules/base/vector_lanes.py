"""Vector lanes: whether a load is contiguous or broadcast across a vector of output elements.

The analysis :mod:`schedules.elementwise` vectorizes on. The innermost output axes are fused into
one index ``V*q + l``; a load's flattened index, written in ``q``, the lane ``l`` and the outer
iterators and simplified with their ranges, must read ``offset + l`` (contiguous, ``offset`` a
multiple of ``V``) or not depend on ``l`` (broadcast).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import tvm
import tvm_ffi
from tvm import sym, tirx
from tvm.ir import Call, TensorLoad
from tvm.runtime import DataType

from tvm_fusion_hw.schedules.base.tir_match import const_int

#: Element types the rule vectorizes (TVM's CUDA codegen has vector types for all of them).
VECTOR_TYPE_CODES = ("float", "bfloat", "int", "uint")


def uses(expr, variables: Sequence[tirx.Var]) -> bool:
    """Whether ``expr`` refers to any of ``variables``."""
    found = []

    def visit(var: tirx.Var) -> None:
        if not found and any(var.same_as(v) for v in variables):
            found.append(var)

    tvm_ffi.structural_walk(expr, [(tirx.Var, visit)], order="post")
    return bool(found)


def substitute(expr, mapping: Sequence[Tuple[tirx.Var, tirx.Expr]]):
    """``expr`` with each variable of ``mapping`` replaced by its expression."""

    def post(var: tirx.Var):
        for old, new in mapping:
            if var.same_as(old):
                return new
        return var

    return tvm_ffi.structural_map(expr, (tirx.Var, post))


def dtype_bytes(dtype) -> Optional[int]:
    """Bytes of one element of a scalar ``dtype`` the rule vectorizes, else None."""
    dt = DataType(str(dtype))
    if dt.lanes != 1 or dt.bits % 8 or not any(str(dtype).startswith(c) for c in VECTOR_TYPE_CODES):
        return None
    return dt.bits // 8


def flat_index(load: TensorLoad) -> Optional[tirx.Expr]:
    """The load's offset into its buffer's memory (elements), or None for a layout that is not
    static."""
    buf = load.source
    shape = [const_int(d) for d in buf.shape]
    if None in shape or not shape or len(shape) != len(load.indices):
        return None
    if buf.strides:
        strides = [const_int(st) for st in buf.strides]
        if None in strides:
            return None
    else:
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    offset = const_int(buf.elem_offset) if buf.elem_offset is not None else 0
    if offset is None:
        return None
    flat = None
    for index, stride in zip(load.indices, strides):
        term = index * stride if stride != 1 else index
        flat = term if flat is None else flat + term
    return flat + offset if offset else flat


class Lanes:
    """The output's innermost axes from ``start`` on, fused and written as ``V*q + l``."""

    def __init__(self, ivars: Sequence[tirx.Var], shape: Sequence[int], start: int, lanes: int):
        dtype = str(ivars[0].ty.dtype)
        self.lanes = lanes
        self.q = tirx.Var("q", dtype)
        self.lane = tirx.Var("l", dtype)
        self.analyzer = sym.Analyzer()
        for var, extent in zip(ivars[:start], shape[:start]):
            self.analyzer.bind(var, tvm.ir.Range(0, extent))
        self.analyzer.bind(self.q, tvm.ir.Range(0, math.prod(shape[start:]) // lanes))
        self.analyzer.bind(self.lane, tvm.ir.Range(0, lanes))
        flat = self.q * lanes + self.lane
        self.mapping = []
        for i in range(start, len(shape)):
            stride = math.prod(shape[i + 1:])
            value = tirx.floordiv(flat, stride) if stride > 1 else flat
            if i > start:
                value = tirx.floormod(value, shape[i])
            self.mapping.append((ivars[i], value))

    def rewrite(self, expr: tirx.Expr) -> tirx.Expr:
        """``expr`` in ``q`` and ``l``, simplified."""
        return self.analyzer.simplify(substitute(expr, self.mapping))

    def classify(self, flat: Optional[tirx.Expr]):
        """``"broadcast"`` (the same element for every lane), ``"contiguous"`` (lane ``l`` reads
        ``offset + l`` with ``offset`` a multiple of ``V``), or None."""
        if flat is None:
            return None
        flat = self.rewrite(flat)
        if not uses(flat, [self.lane]):
            return "broadcast"
        coeffs = sym.detect_linear_equation(flat, [self.lane])
        if len(coeffs) != 2 or const_int(self.analyzer.simplify(coeffs[0])) != 1:
            return None
        offset = coeffs[1]
        if uses(offset, [self.lane]):
            return None
        mod = self.analyzer.modular_set(offset)
        if int(mod.coeff) % self.lanes or int(mod.base) % self.lanes:
            return None
        return "contiguous"

    def conditions_vary(self, expr: tirx.Expr) -> bool:
        """Whether an ``if_then_else`` in ``expr`` has a condition that changes within a vector
        (TVM's vectorizer would scalarize the loop; its guarded loads must stay scalar)."""
        op = tvm.ir.Op.get("prim.if_then_else")
        conds = []
        tvm_ffi.structural_walk(
            expr, [(Call, lambda c: conds.append(c.args[0]) if c.op.same_as(op) else None)], order="post")
        return any(uses(self.rewrite(c), [self.lane]) for c in conds)


def vector_axis(ivars, shape, lanes, loads, flats, value):
    """``(start, kinds)``: the fewest innermost axes (from ``start`` on) that ``lanes`` divides and
    over which every load is contiguous or broadcast (their ``kinds``), or None."""
    for start in reversed(range(len(shape))):
        if shape[start] == 1 or math.prod(shape[start:]) % lanes:
            continue
        view = Lanes(ivars, shape, start, lanes)
        kinds = [view.classify(flat) for flat in flats]
        if all(k is not None for k in kinds) and not view.conditions_vary(value):
            return start, kinds
    return None


def coalesced(ivars, shape, flats):
    """The kinds of the loads for scalar accesses (``"contiguous"``: coefficient 1 on the innermost
    axis of extent > 1, ``"broadcast"``: independent of it), or None for a transpose, a strided
    or a gathered load."""
    inner = max((i for i, extent in enumerate(shape) if extent > 1), default=None)
    if inner is None:
        return None
    analyzer = sym.Analyzer()
    for var, extent in zip(ivars, shape):
        analyzer.bind(var, tvm.ir.Range(0, extent))
    kinds = []
    for flat in flats:
        if flat is None:
            return None
        flat = analyzer.simplify(flat)
        if not uses(flat, [ivars[inner]]):
            kinds.append("broadcast")
            continue
        coeffs = sym.detect_linear_equation(flat, [ivars[inner]])
        if len(coeffs) != 2 or const_int(analyzer.simplify(coeffs[0])) != 1 or uses(coeffs[1], [ivars[inner]]):
            return None
        kinds.append("contiguous")
    return kinds


def distinct(loads, flats, kinds, kind) -> int:
    """Distinct loads (buffer and index) of one kind."""
    return len({ld.source.name + str(f) for ld, f, k in zip(loads, flats, kinds) if k == kind})
