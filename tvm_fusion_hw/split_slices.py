"""SplitsIntoSlices: a ``split`` (or constant ``take``) read only by matmuls becomes slices.

Attention's packed projection is split three ways (``qkv -> reshape -> permute_dims -> split``),
and each part goes on to a batched matmul through more layout ops (``squeeze``, ``permute_dims``,
a constant scale). Legalized, the split is one PrimFunc with three outputs: a copy kernel that
writes all of ``qkv`` again, which no GEMM prologue can take (a producer of several tensors
belongs to one group). Written as ``strided_slice`` per output, each part is a chain of
injective ops from ``qkv`` into one matmul operand, which the GEMM prologue rule
(``layout_prologues``) computes in the matmul's loads: the copy kernel goes, and no byte moves
twice.

Before legalization this pass rewrites a ``relax.split`` (static shape) when every use of its
tuple is ``tuple[i]`` and each output reaches only matmul operands through the ops in
:data:`LAYOUT_OPS` (and element-wise ops with a constant); any other reader keeps the split, one
kernel for all outputs, since a slice per reader would only add launches. A ``take`` of one
constant index (torchvision's ``qkv[0]``, an ONNX Gather; its index, computed from a static shape
by the importer, folded first) becomes a slice and a squeeze the same way; the layout chain before
the takes is repeated per take where takes are all that read it. Each split, and each tensor's
takes, is a decision (rule ``split-slices``) in the fusion report.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import tvm
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

from .fusion.analysis import tensor_shape
from .fusion.decisions import Decision
from .relax_walk import subexpressions

#: the rule's name in decisions
SPLIT_SLICES = "split-slices"
#: ops that only move elements: a slice read through them is still a load of the input
LAYOUT_OPS = ("relax.reshape", "relax.permute_dims", "relax.squeeze", "relax.expand_dims", "relax.strided_slice")
#: element-wise ops that stay injective with a constant operand (a scale, a shift)
CONSTANT_OPS = ("relax.multiply", "relax.divide", "relax.add", "relax.subtract")
#: the arithmetic an importer computes an index with from a static shape, evaluated here
_INDEX_ARITHMETIC = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
                     "relax.less": np.less, "relax.greater": np.greater, "relax.equal": np.equal}
#: the most elements a value of that arithmetic may have (indices and shapes, not tensors)
_INDEX_ELEMENTS = 16


def _op_name(expr: Expr) -> str:
    return expr.op.name if isinstance(expr, Call) and isinstance(expr.op, tvm.ir.Op) else ""


def _bindings(func: relax.Function):
    """``(value of each bound var, the vars whose values read it, the outputs of dataflow
    blocks)`` over ``func``'s blocks; the function's result reads as the key None."""
    values, readers, outputs = {}, {}, set()

    def note(reader, expr):
        for var in subexpressions(expr):  # without each variable's struct info (see relax_walk)
            if isinstance(var, relax.Var):
                readers.setdefault(var, []).append(reader)

    body = func.body
    for block in body.blocks:
        for binding in block.bindings:
            value = binding.value
            values[binding.var] = value
            note(binding.var, value)
            if isinstance(block, relax.DataflowBlock) and not isinstance(binding.var, relax.DataflowVar):
                outputs.add(binding.var)
    note(None, body.body)
    return values, readers, outputs


def _take_to_fold(func: relax.Function) -> bool:
    """Whether ``func`` has a take whose index is not yet a constant and whose result only matmul
    operands read (through layout ops): a slice once its index is folded."""
    if not isinstance(func.body, relax.SeqExpr):
        return False
    values, readers, _ = _bindings(func)
    return any(_op_name(value) == "relax.take" and not isinstance(value.args[1], tvm.ir.expr.Constant)
               and _reaches_matmul(var, values, readers) is None for var, value in values.items())


def _index_values(func: relax.Function) -> Dict[relax.Var, np.ndarray]:
    """The bound values of ``func`` that are a few integers computed from static shapes and
    constants (``shape_of``, ``shape_to_tensor``, ``take``, ``where`` and :data:`_INDEX_ARITHMETIC`),
    evaluated; what the ONNX importer computes a Gather's index with."""
    values, _, _ = _bindings(func)
    known: Dict[relax.Var, np.ndarray] = {}
    for var, value in values.items():  # in binding order
        result = _evaluate(value, known)
        if result is not None:
            known[var] = result
    return known


def _evaluate(expr: Expr, known: Dict[relax.Var, np.ndarray]) -> Optional[np.ndarray]:
    """``expr``'s value where it is index arithmetic (:func:`_index_values`) on ``known``; else None."""
    if isinstance(expr, relax.Var):
        return known.get(expr)
    if isinstance(expr, tvm.ir.expr.Constant):
        array = expr.value.numpy()
        return array if array.size <= _INDEX_ELEMENTS else None
    if isinstance(expr, relax.ShapeExpr):
        dims = list(expr.values)
        return np.array([int(v) for v in dims], "int64") if all(isinstance(v, tvm.tirx.IntImm) for v in dims) else None
    name = _op_name(expr)
    if name == "relax.shape_of":
        shape = tensor_shape(expr.args[0].ty)
        return None if shape is None else np.array(shape, "int64")
    if not name:
        return None
    args = [_evaluate(a, known) for a in expr.args]
    if any(a is None for a in args):
        return None
    result = None
    if name == "relax.shape_to_tensor":
        result = args[0]
    elif name == "relax.take" and expr.attrs.axis is not None and args[0].ndim and args[1].dtype.kind in "iu":
        extent = args[0].shape[int(expr.attrs.axis)]
        if np.all((args[1] >= 0) & (args[1] < extent)):
            result = np.take(args[0], args[1], axis=int(expr.attrs.axis))
    elif name == "relax.where":
        result = np.where(*args)
    elif name in _INDEX_ARITHMETIC:
        result = _INDEX_ARITHMETIC[name](*args)
    if result is None:
        return None
    result = np.asarray(result)
    dtype = getattr(getattr(expr, "ty", None), "dtype", None)
    if dtype is not None and str(dtype) not in ("", "void"):
        result = result.astype(str(dtype))
    return result if result.size <= _INDEX_ELEMENTS else None


@expr_functor.mutator
class _ConstantIndices(PyExprMutator):
    """Each take whose index is one of ``known`` given that index as a constant."""

    def __init__(self, mod: tvm.IRModule, known: Dict[relax.Var, np.ndarray]):
        super().__init__(mod)
        self.known = known

    def visit_call_(self, call: Call) -> Expr:
        index = call.args[1] if _op_name(call) == "relax.take" else None
        if index is None or index not in self.known:
            return super().visit_call_(call)
        return relax.op.take(self.visit_expr(call.args[0]), relax.const(self.known[index]),
                             axis=call.attrs.axis, mode=call.attrs.mode)


def _with_constant_indices(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each take's computed index (:func:`_index_values`) a constant, and the
    arithmetic that computed it gone."""
    found = {gvar: _index_values(f) for gvar, f in mod.functions_items()
             if isinstance(f, relax.Function) and isinstance(f.body, relax.SeqExpr)}
    if not any(found.values()):
        return mod
    rewriter = _ConstantIndices(mod, {var: v for known in found.values() for var, v in known.items()})
    for gvar, known in found.items():
        if known:  # the arithmetic is dead once its takes read the constant, as FoldConstant leaves it
            rewriter.builder_.update_func(gvar, relax.analysis.remove_all_unused(rewriter.visit_expr(mod[gvar])))
    return rewriter.builder_.get()


def _reaches_matmul(var: relax.Var, values, readers, depth: int = 0) -> Optional[str]:
    """None when every reader of ``var`` is a matmul, or a layout op (or an element-wise op with a
    constant) whose readers are in turn; else the first other reader, for the decision's reason."""
    users = readers.get(var, [])
    if not users or depth > 16:
        return "the function's result" if not users else "a chain too long"
    for user in users:
        if user is None:
            return "the function's result"
        value = values[user]
        name = _op_name(value)
        if name == "relax.matmul":
            continue
        if name in LAYOUT_OPS and value.args[0].same_as(var):
            pass
        elif name in CONSTANT_OPS and any(isinstance(a, tvm.ir.expr.Constant) for a in value.args):
            pass
        else:
            return name or type(value).__name__
        other = _reaches_matmul(user, values, readers, depth + 1)
        if other is not None:
            return other
    return None


def split_bounds(call: Call) -> Optional[List[Tuple[int, int]]]:
    """``[(begin, end)]`` along the split axis of each output of a static ``relax.split``, or None."""
    shape = tensor_shape(call.args[0].ty)
    if shape is None:
        return None
    axis = int(call.attrs.axis) % len(shape)
    extent = shape[axis]
    sections = call.attrs.indices_or_sections
    if isinstance(sections, (int, tvm.tirx.IntImm)):
        count = int(sections)
        if count < 1 or extent % count:
            return None
        cuts = [extent // count * i for i in range(1, count)]
    else:
        try:
            cuts = [int(v) for v in sections]
        except (TypeError, ValueError):
            return None
    edges = [0] + [min(max(c, 0), extent) for c in cuts] + [extent]
    return list(zip(edges[:-1], edges[1:]))


def _layout_chain(data: Expr, values, readers) -> Tuple[Expr, List[Call]]:
    """``(root, calls)``: the layout ops (:data:`LAYOUT_OPS`) that make ``data`` from ``root``,
    first to last, each read only by the next (so each slice can repeat them and the originals
    die); ``(data, [])`` when ``data`` is not made so."""
    calls = []
    while isinstance(data, relax.Var) and data in values and _op_name(values[data]) in LAYOUT_OPS \
            and isinstance(values[data].args[0], relax.Var) and len(readers.get(values[data].args[0], [])) == 1:
        calls.insert(0, values[data])
        data = values[data].args[0]
    return data, calls


@expr_functor.mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, slices: Dict[relax.Var, "_Slices"]):
        super().__init__(mod)
        self.slices = slices  # split or take var -> how it is sliced

    def _source(self, plan: "_Slices") -> Expr:
        data = self.visit_expr(plan.root)
        for call in plan.chain:  # the layout ops again, one copy per output: a chain per matmul operand
            data = self.builder_.emit(relax.Call(call.op, [data, *call.args[1:]], call.attrs, call.ty_args))
        return data

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        plan = self.slices.get(binding.var)
        if plan is None or plan.kind != "take":
            super().visit_var_binding_(binding)
            return
        begin, end = plan.bounds[0]
        part = self.builder_.emit(relax.op.strided_slice(self._source(plan), axes=[plan.axis], begin=[begin],
                                                         end=[end], assume_inbound=True))
        self.set_var_remap(binding.var, self.builder_.emit(relax.op.squeeze(part, axis=[plan.axis])))

    def visit_tuple_getitem_(self, item: relax.TupleGetItem) -> Expr:
        source = item.tuple_value
        if not (isinstance(source, relax.Var) and source in self.slices):
            return super().visit_tuple_getitem_(item)
        plan = self.slices[source]
        begin, end = plan.bounds[int(item.index)]
        return relax.op.strided_slice(self._source(plan), axes=[plan.axis], begin=[begin], end=[end],
                                      assume_inbound=True)  # the bounds are the split's own


class _Slices(NamedTuple):
    """One split's or take's rewrite: its input made from ``root`` by ``chain``, cut along ``axis``
    (``kind`` "split": a slice per output; "take": one slice, then the axis squeezed)."""

    kind: str
    root: Expr
    chain: List[Call]
    axis: int
    bounds: List[Tuple[int, int]]


@tvm.transform.module_pass(opt_level=0, name="SplitsIntoSlices")
class SplitsIntoSlices:
    """Rewrite each ``split`` whose outputs all reach matmul operands through layout ops into a
    ``strided_slice`` per output (see the module docstring); :attr:`decisions` lists every split
    considered."""

    def __init__(self):
        self.decisions: List[Decision] = []

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self.decisions = []
        original = mod
        if any(_take_to_fold(f) for f in mod.functions.values() if isinstance(f, relax.Function)):
            # an ONNX Gather's index arrives as arithmetic on the input's static shape: fold it to
            # the constant it is before deciding, here where the arithmetic is a few integers, else by
            # FoldConstant (which builds each op it folds: 0.7 s for DeiT-T's one index), and only
            # where a take could become a slice
            mod = _with_constant_indices(mod)
            if any(_take_to_fold(f) for f in mod.functions.values() if isinstance(f, relax.Function)):
                mod = relax.transform.FoldConstant()(relax.transform.CanonicalizeBindings()(mod))
        plans = {gvar: self._plan(func) for gvar, func in mod.functions_items()
                 if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr)}
        slices = {var: plan for found in plans.values() for var, plan in found.items()}
        if not slices:
            return original  # nothing rewritten: the module as it came
        rewriter = _Rewriter(mod, slices)
        for gvar, found in plans.items():
            if found:  # the split itself is dead now: drop it before it is legalized into a kernel
                rewriter.builder_.update_func(gvar, relax.analysis.remove_all_unused(rewriter.visit_expr(mod[gvar])))
        return rewriter.builder_.get()

    def _plan(self, func: relax.Function):
        values, readers, outputs = _bindings(func)
        slices = {}
        for var, value in values.items():
            if _op_name(value) != "relax.split":
                continue
            data = value.args[0]
            shape = tensor_shape(data.ty)
            label = f"split {'x'.join(map(str, shape or ['?']))} axis {int(value.attrs.axis)}"
            bounds = split_bounds(value)
            items = readers.get(var, [])
            reason = None
            if bounds is None:
                reason = "its shape or sections are not static"
            elif not all(r is not None and isinstance(values[r], relax.TupleGetItem) for r in items):
                reason = "its tuple is read whole"
            else:
                for item in items:
                    other = _reaches_matmul(item, values, readers)
                    if other is not None:
                        reason = f"output {int(values[item].index)} is read by {other}, not only by matmuls"
                        break
            use = reason is None and bool(items)
            if use:
                root, chain = _layout_chain(data, values, readers)
                slices[var] = _Slices("split", root, chain, int(value.attrs.axis) % len(shape), bounds)
                reason = (f"each of its {len(bounds)} outputs reaches only matmul operands through layout "
                          "ops: a slice per output, which the GEMM's loads can read, instead of a copy kernel")
            self.decisions.append(Decision(SPLIT_SLICES, label, f"{len(bounds or [])} outputs", use,
                                           reason or "nothing reads it", {"outputs": len(bounds or [])},
                                           verdict="slices" if use else "split"))
        self._plan_takes(values, readers, outputs, slices)
        return slices

    def _plan_takes(self, values, readers, outputs, slices) -> None:
        """The takes of one constant index (``qkv[0]``, ``qkv[1]``, ...), one decision per input
        tensor: the input's layout chain is repeated per take only where takes are all that read it."""
        by_source: Dict[relax.Var, List[Tuple[relax.Var, int, int]]] = {}
        for var, value in values.items():
            picked = constant_take(value)
            # a dataflow block's output stays bound to its expression: a remap would leak a local var
            if picked is not None and var not in outputs:
                by_source.setdefault(value.args[0], []).append((var, *picked))
        for data, takes in by_source.items():
            shape = tensor_shape(data.ty)
            label = f"take {'x'.join(map(str, shape))} axis {takes[0][2]}"
            other = next((o for o in (_reaches_matmul(v, values, readers) for v, _, _ in takes) if o), None)
            use = other is None
            if use:
                alone = len(readers.get(data, [])) == len(takes)
                root, chain = _layout_chain(data, values, readers) if alone else (data, [])
                for var, index, axis in takes:
                    slices[var] = _Slices("take", root, chain, axis, [(index, index + 1)])
                reason = (f"each of its {len(takes)} constant takes reaches only matmul operands through layout ops: "
                          "a slice each, which the GEMM's loads can read, instead of a copy kernel each")
            else:
                reason = f"a take is read by {other}, not only by matmuls"
            self.decisions.append(Decision(SPLIT_SLICES, label, f"{len(takes)} takes", use, reason,
                                           {"outputs": len(takes)}, verdict="slices" if use else "take"))


def constant_take(value: Expr) -> Optional[Tuple[int, int]]:
    """``(index, axis)`` of ``take(x, c, axis)`` with ``c`` one constant integer in ``x``'s static
    extent (negative from the end), or None."""
    if _op_name(value) != "relax.take" or value.attrs.axis is None:
        return None
    index, shape = value.args[1], tensor_shape(value.args[0].ty)
    if not isinstance(index, tvm.ir.expr.Constant) or shape is None:
        return None
    array = index.value.numpy()
    if array.ndim != 0 or array.dtype.kind not in "iu":
        return None
    axis = int(value.attrs.axis) % len(shape)
    at = int(array) + (shape[axis] if int(array) < 0 else 0)
    return (at, axis) if 0 <= at < shape[axis] else None
