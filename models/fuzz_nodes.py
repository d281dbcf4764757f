"""How each step of a fuzz graph becomes ONNX nodes, and the table of operators.

``apply_<op>(graph, g, args, params)`` appends the nodes of one step through the graph's
:class:`~.common.GraphBuilder` ``g`` (``args`` are :class:`~.fuzz_ops.Value` s) and returns the new
value's name and a rough bound on its magnitude. Values stay finite by construction (NNSmith's
concern): ``Exp`` only sees clipped inputs, every denominator is at least 0.5 away from zero,
weights keep activations O(1) (He-normal convs, LeCun-normal matmuls, BatchNormalization near
identity), and :class:`~.fuzz.FuzzGraph` refuses a step whose bound passes
:data:`~.fuzz_ops.MAX_BOUND`.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Tuple

import numpy as np

from . import fuzz_ops
from .fuzz_ops import UNARY, Value, _prod

_ONNX_UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "erf": "Erf"}


def apply_unary(graph, g, op, args, p):
    (a,) = args
    x = a.name
    if op in _ONNX_UNARY:
        bound = {"relu": a.bound, "sigmoid": 1.0, "tanh": 1.0, "erf": 1.0}[op]
        return g.op(_ONNX_UNARY[op], [x]), bound
    if op == "clip":
        lo = g.shared_const(f"clip.{p['min']}", p["min"]) if p["min"] is not None else ""
        ins = [x, lo] + ([g.shared_const(f"clip.{p['max']}", p["max"])] if p["max"] is not None else [])
        limit = max(abs(v) for v in (p["min"], p["max"]) if v is not None)
        return g.op("Clip", ins), (min(a.bound, limit) if p["min"] is not None and p["max"] is not None
                                   else max(a.bound, limit))
    if op == "exp":
        bound = a.bound
        if p["clip"] is not None:
            c = p["clip"]
            x = g.op("Clip", [x, g.shared_const(f"clip.{-c}", -c), g.shared_const(f"clip.{c}", c)])
            bound = min(bound, c)
        return g.op("Exp", [x]), math.exp(min(bound, 80.0))
    if op == "gelu":  # PyTorch's export of nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2)))
        e = g.op("Erf", [g.op("Div", [x, g.shared_const("gelu.sqrt2", math.sqrt(2.0))])])
        y = g.op("Mul", [x, g.op("Add", [e, g.shared_const("one", 1.0)])])
        return g.op("Mul", [y, g.shared_const("half", 0.5)]), a.bound
    if op == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x])]), a.bound
    raise ValueError(op)


def apply_binary(graph, g, op, args, p):
    a = args[0]
    if p["other"] == "value":
        b = args[1]
    elif p["other"] == "input":
        b = graph.add_input(p["shape"])
    else:
        shape = tuple(p["shape"])
        name = g.fresh(f"{op}.const")
        if op == "div":
            vals = g.rng.uniform(0.5, 2.0, size=shape) * g.rng.choice([-1.0, 1.0], size=shape)
            g.const(name, vals)
        elif op == "mul":
            g.uniform(name, shape, -1.5, 1.5)
        else:
            g.normal(name, shape, 0.5)
        b = Value(name, shape, 2.0)
    if op == "div":
        den = b.name
        if p["den"] == "sigmoid":
            den = g.op("Add", [g.op("Sigmoid", [den]), g.shared_const("half", 0.5)])
        elif p["den"] == "abs":
            den = g.op("Add", [g.op("Abs", [den]), g.shared_const("one", 1.0)])
        return g.op("Div", [a.name, den]), 2.0 * a.bound
    ins = [b.name, a.name] if p["swap"] else [a.name, b.name]
    bound = a.bound * b.bound if op == "mul" else a.bound + b.bound
    return g.op({"add": "Add", "sub": "Sub", "mul": "Mul"}[op], ins), bound


def _ints(g, prefix, values):
    return g.const(g.fresh(prefix), np.asarray(values, dtype=np.int64), dtype=np.int64)


def apply_reshape(graph, g, args, p):
    (a,) = args
    return g.op("Reshape", [a.name, _ints(g, "reshape.shape", p["shape"])]), a.bound


def apply_flatten(graph, g, args, p):
    (a,) = args
    return g.op("Flatten", [a.name], axis=p["axis"]), a.bound


def apply_transpose(graph, g, args, p):
    (a,) = args
    return g.op("Transpose", [a.name], perm=p["perm"]), a.bound


def apply_concat(graph, g, args, p):
    ax = p["axis"] % args[0].rank
    ins = [v.name for v in args]
    bound = max(v.bound for v in args)
    for kind, size in p["extra"]:
        shape = list(args[0].shape)
        shape[ax] = size
        if kind == "input":
            ins.append(graph.add_input(shape).name)
        else:
            ins.append(g.normal(g.fresh("concat.const"), shape, 0.5))
            bound = max(bound, 2.0)
    return g.op("Concat", ins, axis=p["axis"]), bound


def apply_slice(graph, g, args, p):
    (a,) = args
    ins = [a.name] + [_ints(g, f"slice.{k}", p[k]) for k in ("starts", "ends", "axes", "steps")]
    return g.op("Slice", ins), a.bound


def apply_reduce(graph, g, args, p):
    (a,) = args
    axes = p["axes"]
    n = a.size if axes is None else _prod(a.shape[ax] for ax in axes)
    bound = a.bound * n if p["op"] == "ReduceSum" else a.bound
    if p["op"] == "ReduceSum":  # axes is an input since opset 13
        ins = [a.name] + ([_ints(g, "reduce.axes", axes)] if axes is not None else [])
        return g.op("ReduceSum", ins, keepdims=p["keepdims"]), bound
    attrs = {"axes": axes} if axes is not None else {}
    return g.op(p["op"], [a.name], keepdims=p["keepdims"], **attrs), bound


def apply_conv(graph, g, args, p):
    (a,) = args
    cin = a.shape[1]
    name = g.fresh("conv")
    fan_in = cin // p["group"] * _prod(p["kernel"])
    w = g.normal(f"{name}.weight", (p["cout"], cin // p["group"], *p["kernel"]), math.sqrt(2.0 / fan_in))
    ins = [a.name, w] + ([g.normal(f"{name}.bias", (p["cout"],), 0.05)] if p["bias"] else [])
    attrs = {"kernel_shape": p["kernel"], "strides": p["strides"], "dilations": p["dilations"],
             "group": p["group"]}
    if "auto_pad" in p:
        attrs["auto_pad"] = p["auto_pad"]
    else:
        attrs["pads"] = p["pads"]
    return graph.node("Conv", ins, name, **attrs), 3.0 * a.bound + 0.2


def apply_pool(graph, g, args, p):
    (a,) = args
    attrs = {"kernel_shape": p["kernel"], "strides": p["strides"], "pads": p["pads"],
             "ceil_mode": p["ceil_mode"]}
    for key in ("dilations", "count_include_pad"):
        if key in p:
            attrs[key] = p[key]
    return g.op(p["op"], [a.name], **attrs), a.bound


def apply_global_pool(graph, g, args, p):
    (a,) = args
    return g.op(p["op"], [a.name]), a.bound


def apply_matmul(graph, g, args, p):
    a = args[0]
    k = a.shape[-1]
    if p["b"] == "weight":
        shape = (k, p["n"]) if p["n"] else (k,)
        b = g.normal(g.fresh("matmul.weight"), shape, math.sqrt(1.0 / k))
        return g.op("MatMul", [a.name, b]), 3.0 * a.bound
    if p["b"] == "value":
        b = args[1]
    elif p["b"] == "self_t":
        perm = list(range(a.rank - 2)) + [a.rank - 1, a.rank - 2]
        b = Value(g.op("Transpose", [a.name], perm=perm), (), a.bound)
    else:
        b = graph.add_input(p["shape"])
    return g.op("MatMul", [a.name, b.name]), a.bound * b.bound * k


def apply_gemm(graph, g, args, p):
    (a,) = args
    x = a.name if a.rank == 2 else g.op("Flatten", [a.name], axis=1)
    rows, cols = (a.shape if a.rank == 2 else (_prod(a.shape[:1]), _prod(a.shape[1:])))
    m, k = (cols, rows) if p["transA"] else (rows, cols)
    n = p["n"]
    bshape = (n, k) if p["transB"] else (k, n)
    name = g.fresh("gemm")
    if p["b"] == "input":
        b, bbound = graph.add_input(bshape).name, k * 1.0
    else:
        b, bbound = g.normal(f"{name}.weight", bshape, math.sqrt(1.0 / k)), 3.0
    ins = [x, b]
    cshape = {"none": None, "n": (n,), "1n": (1, n), "mn": (m, n), "m1": (m, 1), "scalar": (),
              "one": (1,)}[p["c"]]
    if cshape is not None:
        ins.append(g.normal(f"{name}.bias", cshape, 0.1))
    bound = abs(p["alpha"]) * a.bound * bbound + abs(p["beta"]) * 0.5
    return graph.node("Gemm", ins, name, alpha=p["alpha"], beta=p["beta"], transA=p["transA"],
                      transB=p["transB"]), bound


def apply_softmax(graph, g, args, p):
    (a,) = args
    n = a.shape[p["axis"]]
    if p["log"]:
        return g.op("LogSoftmax", [a.name], axis=p["axis"]), 2.0 * a.bound + math.log(n) + 1.0
    return g.op("Softmax", [a.name], axis=p["axis"]), 1.0


def apply_layernorm(graph, g, args, p):
    (a,) = args
    shape = a.shape[p["axis"]:] if p["axis"] >= 0 else a.shape[a.rank + p["axis"]:]
    name = g.fresh("ln")
    ins = [a.name, g.normal(f"{name}.weight", shape, 0.1, mean=1.0)]
    if p["bias"]:
        ins.append(g.normal(f"{name}.bias", shape, 0.05))
    return graph.node("LayerNormalization", ins, name, axis=p["axis"], epsilon=p["eps"]), \
        1.5 * math.sqrt(_prod(shape)) + 0.5


def apply_batchnorm(graph, g, args, p):
    (a,) = args
    c = a.shape[1]
    name = g.fresh("bn")
    ins = [a.name, g.uniform(f"{name}.weight", (c,), 0.8, 1.2), g.normal(f"{name}.bias", (c,), 0.05),
           g.normal(f"{name}.running_mean", (c,), 0.05), g.uniform(f"{name}.running_var", (c,), 0.8, 1.2)]
    return graph.node("BatchNormalization", ins, name, epsilon=p["eps"], momentum=0.9), \
        1.4 * a.bound + 0.3


def _op(propose, apply, op=None):
    if op is None:
        return propose, apply
    return (lambda graph, ch, a: propose(graph, ch, a, op),
            lambda graph, g, args, p: apply(graph, g, op, args, p))


#: op -> (propose, apply, weight when drawing)
OPS: Dict[str, Tuple[Callable, Callable, int]] = {}
for _name in UNARY:
    OPS[_name] = (*_op(fuzz_ops.propose_unary, apply_unary, _name), 2)
for _name in ("add", "sub", "mul", "div"):
    OPS[_name] = (*_op(fuzz_ops.propose_binary, apply_binary, _name), 3)
for _name, _weight in (("reshape", 3), ("flatten", 1), ("transpose", 3), ("concat", 3),
                       ("slice", 3), ("reduce", 4), ("conv", 5), ("pool", 4), ("global_pool", 2),
                       ("matmul", 5), ("gemm", 2), ("softmax", 3), ("layernorm", 3),
                       ("batchnorm", 3)):
    OPS[_name] = (getattr(fuzz_ops, f"propose_{_name}"), globals()[f"apply_{_name}"], _weight)
#: op names, each repeated by its weight: what a chooser picks from
OP_TABLE: Tuple[str, ...] = tuple(name for name, (_, _, w) in OPS.items() for _ in range(w))
