"""Stock FuseOps' grouping of a module in the plugin's terms: the bindings each kernel computes.

Stock FuseOps renames the bindings it moves into a fused function's caller, so its groups cannot be
read off names. They are matched by structure instead: an op inside a fused function is the
binding of the unfused module that calls the same PrimFunc on the same (matched) arguments. The
plugin's report names its groups' ops by those binding names (``GroupSummary.ops``), so the two
groupings line up op by op. FLOPs and compulsory bytes of each stock kernel are read from its
fused PrimFunc the way the fusion pass reads an operator's (:func:`fusion.analysis.analyze_func`).
"""

from __future__ import annotations

import dataclasses

import tvm
import tvm_ffi
from tvm import relax

from tvm_fusion_hw.fusion.analysis import analyze_func
from tvm_fusion_hw.fusion.graph import CALL_TIR


@dataclasses.dataclass(frozen=True)
class StockKernel:
    """One kernel of stock FuseOps' plan: a call of ``main``."""

    name: str  # its PrimFunc after FuseTIR
    bindings: tuple[str, ...]  # binding names of its ops in the unfused module (projections left out)
    ops: tuple[str, ...]  # PrimFunc names of those ops
    flops: float
    compulsory_bytes: int

    @property
    def intensity(self) -> float:
        return self.flops / self.compulsory_bytes if self.compulsory_bytes else 0.0


def legalized(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``mod`` before fusion: the prefix :func:`pipeline.fused_module` runs (LegalizeOps,
    AnnotateTIROpPattern, FoldConstant)."""
    with target:
        return tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                         relax.transform.FoldConstant()])(mod)


def _bindings(func: relax.Function) -> list[relax.Binding]:
    return [b for block in func.body.blocks for b in block.bindings]


def _is_primitive(func) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and "Primitive" in func.attrs


class _Matcher:
    """Finds, for an expression of the fused module, the binding of the unfused module it is."""

    def __init__(self, pre: relax.Function):
        self.env: dict[relax.Var, str] = {p: "param:" + p.name for p in pre.params}
        #: bindings by what they compute; one op computed twice (a clip bound's NaN check in two
        #: blocks) has two names, handed out in program order, each once
        self.by_key: dict[tuple, list[str]] = {}
        for binding in _bindings(pre):
            key = self.key(binding.value)
            if key is not None:
                self.by_key.setdefault(key, []).append(binding.var.name)
                self.env[binding.var] = binding.var.name
        self.env = {}  # the fused module's variables are matched afresh

    def arg(self, expr) -> object:
        if isinstance(expr, relax.Var):
            return self.env.get(expr, "?" + expr.name)
        if isinstance(expr, tvm.ir.expr.Constant):
            return ("const", tvm_ffi.structural_hash(expr))
        if isinstance(expr, relax.Tuple):
            return tuple(self.arg(f) for f in expr.fields)
        return ("expr", tvm_ffi.structural_hash(expr))

    def key(self, value) -> tuple | None:
        if isinstance(value, relax.TupleGetItem):
            return ("item", value.index, self.arg(value.tuple_value))
        if isinstance(value, relax.Call) and value.op.same_as(CALL_TIR):
            return ("call", value.args[0].name_hint, self.arg(value.args[1]))
        return None

    def match(self, var: relax.Var, value) -> str | None:
        """The unfused binding ``value`` is; remember it as ``var``'s."""
        key = self.key(value)
        names = self.by_key.get(key) if key is not None else None
        if not names:
            return None
        self.env[var] = names.pop(0)
        return self.env[var]


def _matched_env(matcher: _Matcher, pre_main: relax.Function, post_main: relax.Function) -> None:
    for pre_p, post_p in zip(pre_main.params, post_main.params):
        matcher.env[post_p] = "param:" + pre_p.name


def stock_groups_by_binding(pre: tvm.IRModule, fused: tvm.IRModule) -> list[list[str]]:
    """Per kernel call of ``main`` in a FuseOps result ``fused`` of ``pre``, in call order: the
    unfused bindings it computes (projections left out, in their unfused order)."""
    matcher = _Matcher(pre["main"])
    _matched_env(matcher, pre["main"], fused["main"])
    order = {b.var.name: k for k, b in enumerate(_bindings(pre["main"]))}
    projections = {b.var.name for b in _bindings(pre["main"]) if isinstance(b.value, relax.TupleGetItem)}
    outputs: dict[relax.Var, list] = {}  # a fused call's tuple result -> its outputs' unfused names
    groups: list[list[str]] = []
    for binding in _bindings(fused["main"]):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and _is_primitive(fused[value.op]):
            inner = fused[value.op]
            for param, arg in zip(inner.params, value.args):
                matcher.env[param] = matcher.arg(arg)
            names = [matcher.match(b.var, b.value) for b in _bindings(inner)]
            members = [n for n in names if n is not None and n not in projections]
            groups.append(sorted(members, key=order.get))
            ret = inner.body.body
            if isinstance(ret, relax.Tuple):
                outputs[binding.var] = [matcher.env.get(v) for v in ret.fields]
            elif ret in matcher.env:
                matcher.env[binding.var] = matcher.env[ret]
        elif isinstance(value, relax.TupleGetItem) and value.tuple_value in outputs:
            name = outputs[value.tuple_value][value.index]
            if name is not None:
                matcher.env[binding.var] = name
        elif isinstance(value, relax.Var):  # an alias (gv = lv2)
            if value in matcher.env:
                matcher.env[binding.var] = matcher.env[value]
        elif isinstance(value, relax.Call) and value.op.same_as(CALL_TIR):
            name = matcher.match(binding.var, value)
            groups.append([name] if name is not None else [])
        else:
            matcher.match(binding.var, value)
    return groups


def _num_outputs(call: relax.Call) -> int:
    out = call.ty_args[0] if call.ty_args else None
    return len(out.fields) if isinstance(out, relax.TupleType) else 1


def stock_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> list[StockKernel]:
    """Every kernel stock FuseOps makes of ``mod``'s ``main``, in call order (as
    :func:`pipeline.stock_groups` names them), with its ops and roofline figures."""
    pre = legalized(mod, target)
    with target:
        grouped = relax.transform.FuseOps()(pre)
        fused = relax.transform.FuseTIR()(grouped)
    members = stock_groups_by_binding(pre, grouped)
    op_of = {b.var.name: b.value.args[0].name_hint for b in _bindings(pre["main"])
             if isinstance(b.value, relax.Call) and b.value.op.same_as(CALL_TIR)}
    calls = [b.value for b in _bindings(fused["main"])
             if isinstance(b.value, relax.Call) and b.value.op.same_as(CALL_TIR)]
    if len(calls) != len(members):  # FuseTIR replaces each call one for one; else no grouping known
        members = [[] for _ in calls]
    kernels = []
    for call, group in zip(calls, members):
        name = call.args[0].name_hint
        info = analyze_func(name, fused[name], 0, _num_outputs(call))
        bindings = tuple(group)
        kernels.append(StockKernel(name, bindings, tuple(op_of.get(b, b) for b in bindings),
                                   0.0 if info.symbolic else info.flops,
                                   0 if info.symbolic else info.input_bytes + info.output_bytes))
    return kernels
