"""The expressions inside a Relax expression, without the struct info of its variables.

``relax.analysis.post_order_visit`` also walks each variable's struct info. In a module whose
weights are lifted, every ``params[i]`` of ``main_transform_params`` carries the shapes of all the
parameters, so a pass that visits each binding with it walks them quadratically (EfficientNetV2-S:
2.3 s of a 5 s compile). :func:`subexpressions` visits the same expressions in the same order,
struct info left out.
"""

from __future__ import annotations

from typing import Iterator

from tvm import relax


def subexpressions(expr: relax.Expr) -> Iterator[relax.Expr]:
    """``expr`` and every expression in it, children first (``post_order_visit``'s order); the
    variables a binding or a function defines are not visited, as there."""
    if isinstance(expr, relax.Call):
        children = (expr.op, *expr.args)
    elif isinstance(expr, relax.Tuple):
        children = tuple(expr.fields)
    elif isinstance(expr, relax.TupleGetItem):
        children = (expr.tuple_value,)
    elif isinstance(expr, relax.SeqExpr):
        children = (*(binding.value for block in expr.blocks for binding in block.bindings), expr.body)
    elif isinstance(expr, relax.If):
        children = (expr.cond, expr.true_branch, expr.false_branch)
    elif isinstance(expr, relax.Function):
        children = (expr.body,)
    else:  # variables, constants, shapes, prim values, ops, global vars
        children = ()
    for child in children:
        yield from subexpressions(child)
    yield expr
