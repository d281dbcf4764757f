"""WinogradConv2d: 3x3 stride-1 convolutions computed by Winograd F(m x m, 3 x 3) where the profile says it pays.

A 3x3 convolution as an implicit GEMM spends 9 multiply-adds per output pixel and input channel;
Winograd F(4x4, 3x3) spends 36 per 16 pixels, a quarter, at the price of two tensors it writes and
reads back (the transformed input ``V`` and the GEMMs' output ``M``, each ``alpha^2 / m^2`` = 2.25
times the tensor it transforms) and two more kernels. So it is a trade of FLOPs for bytes and
kernels, which the hardware decides: both ways are costed on the profile as the pipeline would run
them (:mod:`.winograd_cost`: the direct convolution's and the batched GEMM's tile plans with their
measured model errors, the transforms' bytes at the bandwidth and their least time), and the
cheaper is taken. On a profile rich in bandwidth against its compute (the H200) Winograd takes
most layers; where bandwidth is short (the RTX 3060) the transforms' bytes keep small-channel
layers direct.

Before legalization this pass rewrites each ``relax.nn.conv2d`` it takes (NCHW / OIHW, float32,
3x3, stride 1, dilation 1, one group, static shapes) into the filter transform (a constant, computed
here, for a constant filter), the data transform, a batched ``matmul`` (the GEMM template's) and
the output transform (which the convolution's epilogue fuses into). The decision and its figures
are recorded (:attr:`WinogradConv2d.decisions`, rule ``winograd``) and the pipeline puts them in the
fusion report.
"""

from __future__ import annotations

from typing import List, Optional

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

from .errors import FusionHWError
from .fusion.analysis import WINDOW_ATTR, tensor_shape
from .fusion.decisions import Decision
from .fusion.graph import COMM_REDUCE, OUT_EWISE_FUSABLE
from .fusion.policy import WINOGRAD_MODES
from .hardware.profile import HardwareProfile
from .hardware.target import target as profile_target
from .schedules.winograd.transforms import (FILTER_RULE, TILE_SIZES, WinogradShape, data_transform, filter_transform,
                                             filter_transform_numpy, output_transform)
from .winograd_cost import KernelPlanner, WinogradCost, WinogradCostModel

#: the rule's name in decisions
WINOGRAD = "winograd"
#: Each transform's fusion pattern and kind, those of its window sum: a reduction for the filter's,
#: out-elementwise-fusable for the data's and the output's (so the convolution's epilogue fuses into
#: the output transform), a window reduction to the policy. Given, not inferred: the TE computes
#: write each output's window out as one sum (no reduction loop), which TVM's analysis would call
#: injective, and fusion would then merge a data transform into the output transform before it.
_OP_PATTERNS = {"filter": COMM_REDUCE, "data": OUT_EWISE_FUSABLE, "output": OUT_EWISE_FUSABLE}


def _transform_attrs(kind: str, window: int) -> dict:
    """The PrimFunc attributes of a transform (``window``: the terms a pass sums over)."""
    return {"op_pattern": _OP_PATTERNS[kind], WINDOW_ATTR: [window]}


def eligible_shape(call: Call, m: int) -> Optional[WinogradShape]:
    """The convolution of ``call`` cut into ``m x m`` tiles, or None when Winograd does not apply."""
    if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.nn.conv2d":
        return None
    attrs = call.attrs
    data_ty, weight_ty = call.args[0].ty, call.args[1].ty
    shapes = [tensor_shape(t) for t in (data_ty, weight_ty)]
    if any(s is None or len(s) != 4 for s in shapes) or str(data_ty.dtype) != "float32" or \
            str(weight_ty.dtype) != "float32":
        return None
    out_dtype = str(attrs.out_dtype)
    if out_dtype not in ("", "None", "void", "float32"):
        return None
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NCHW", "OIHW", "NCHW"):
        return None
    if int(attrs.groups) != 1 or [int(v) for v in attrs.strides] != [1, 1] or [int(v) for v in attrs.dilation] != [1, 1]:
        return None
    (batch, in_ch, height, width), (out_ch, w_in, kh, kw) = shapes
    if (kh, kw) != (3, 3) or w_in != in_ch:
        return None
    pad = tuple(int(v) for v in attrs.padding)
    pad = pad * 2 if len(pad) == 2 else pad
    shape = WinogradShape(batch, in_ch, out_ch, height, width, pad, m)
    return shape if shape.out_height > 0 and shape.out_width > 0 else None


#: ``mode`` values: decide on the profile, rewrite every eligible convolution, or none
MODES = WINOGRAD_MODES


def decide(shape: WinogradShape, profile: HardwareProfile, cost: WinogradCost, label: str,
           mode: str = "auto") -> Decision:
    """Winograd or direct for one convolution on ``profile``, the cheaper of ``cost``'s two ways (see
    the module docstring); ``mode`` "always" takes Winograd whatever the costs (to measure it where
    the rule would not)."""
    saved, added = shape.direct_flops() - shape.gemm_flops(), shape.transformed_bytes()
    figures = {"tile": shape.m, "direct_flops": shape.direct_flops(), "winograd_flops": shape.gemm_flops(),
               "added_bytes": added, "saved_flop_per_added_byte": round(saved / added, 2),
               "ridge_flop_per_byte": round(profile.ridge_point_flop_per_byte, 2), **cost.figures()}
    use = mode == "always" or (mode == "auto" and cost.pays)
    forced = "" if mode == "auto" else f" (mode {mode})"
    reason = (f"F({shape.m}x{shape.m},3x3): {cost.describe()}; {saved / 1e9:.3g} GFLOP saved for "
              f"{added / 1e6:.3g} MB of transforms ({saved / added:.1f} FLOP/B vs ridge "
              f"{profile.ridge_point_flop_per_byte:.1f}){forced}")
    # the same producer and consumer whatever the verdict, so that profiles' decisions align
    return Decision(WINOGRAD, label, f"F({shape.m}x{shape.m},3x3)", use, reason, figures,
                    verdict="wino" if use else "direct")


@expr_functor.mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, owner: "WinogradConv2d"):
        super().__init__(mod)
        self.owner = owner

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        owner = self.owner
        shape = eligible_shape(call, owner.tile) if isinstance(call, Call) else None
        if shape is None:
            return call
        data, weight = call.args
        label = (f"conv2d {shape.batch}x{shape.in_channels}x{shape.height}x{shape.width} -> "
                 f"{shape.out_channels}")
        filter_per_call = not isinstance(weight, tvm.ir.expr.Constant) and weight not in owner.lifted_weights
        decision = decide(shape, owner.profile, owner.costs.cost(shape, filter_per_call), label, owner.mode)
        owner.decisions.append(decision)
        if not decision.fused:
            return call
        bb = self.builder_
        if isinstance(weight, tvm.ir.expr.Constant):
            filters = relax.const(filter_transform_numpy(weight.value.numpy(), shape.m))
        else:
            filters = bb.emit_te(lambda g: filter_transform(g, shape.m), weight, primfunc_name_hint="winograd_filter",
                                 primfunc_attrs=_transform_attrs("filter", 3))
        transformed = bb.emit_te(lambda d: data_transform(d, shape), data, primfunc_name_hint="winograd_data",
                                 primfunc_attrs=_transform_attrs("data", shape.alpha))
        products = bb.emit(relax.op.matmul(filters, transformed))
        return bb.call_te(lambda p: output_transform(p, shape), products, primfunc_name_hint="winograd_output",
                          primfunc_attrs=_transform_attrs("output", shape.alpha))


@tvm.transform.module_pass(opt_level=0, name="WinogradConv2d")
class WinogradConv2d:
    """Rewrite the module's 3x3 stride-1 convolutions to Winograd F(``tile`` x ``tile``, 3x3)
    where ``profile`` says it pays (``mode`` "auto"; "always", "off": see :data:`MODES`);
    :attr:`decisions` lists every convolution considered. ``kernel_plan``: how the schedule
    templates would run a PrimFunc (``TemplatePlanners.kernel_plan``), which costs both ways; None
    costs the GEMMs at the profile's peak."""

    def __init__(self, profile: HardwareProfile, tile: int = 4, mode: str = "auto",
                 kernel_plan: Optional[KernelPlanner] = None):
        if mode not in MODES:
            raise FusionHWError(f"winograd mode must be one of {', '.join(MODES)}, got '{mode}'")
        if tile not in TILE_SIZES:
            raise FusionHWError(f"winograd tile must be one of {TILE_SIZES}, got {tile}")
        self.profile, self.tile, self.mode = profile, tile, mode
        self.decisions: List[Decision] = []
        self.costs = WinogradCostModel(profile, profile_target(profile), kernel_plan)
        self.lifted_weights: set = set()  # per module: main's weights that main_transform_params transforms

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self.decisions = []
        if self.mode == "off":
            return mod
        self.lifted_weights = _lifted_weights(mod)
        rewriter = _Rewriter(mod, self)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        if not any(d.fused for d in self.decisions):
            return mod  # nothing rewritten: the module as it came
        return lift_filter_transforms(rewriter.builder_.get())


#: the function ``relax.transform.LiftTransformParams`` makes of ``main``'s weight transforms
_TRANSFORM_PARAMS = "main_transform_params"


def _lifted_weights(mod: tvm.IRModule) -> set:
    """``main``'s weights (its parameters after ``num_input``) where ``main_transform_params``
    transforms them once: a filter transform of one of them moves there (no cost per inference)."""
    names = {gv.name_hint for gv in mod.get_global_vars()}
    if not {"main", _TRANSFORM_PARAMS} <= names or "num_input" not in (mod["main"].attrs or {}):
        return set()
    return set(mod["main"].params[int(mod["main"].attrs["num_input"]):])


def lift_filter_transforms(mod: tvm.IRModule) -> tvm.IRModule:
    """Filter transforms of ``main``'s weights moved into ``main_transform_params``, where the
    module has one (weights lifted at import, as bundles import them): the weights are then
    transformed once, not on every inference. A weight read by anything else stays as it is."""
    names = {gv.name_hint: gv for gv in mod.get_global_vars()}
    main = mod["main"] if "main" in names else None
    if _TRANSFORM_PARAMS not in names or main is None or "num_input" not in (main.attrs or {}):
        return mod
    num_input = int(main.attrs["num_input"])
    weights = {p: i - num_input for i, p in enumerate(main.params) if i >= num_input}
    uses: dict = {}
    relax.analysis.post_order_visit(main.body, lambda e: isinstance(e, relax.Var) and e in weights and uses.update(
        {e: uses.get(e, 0) + 1}))
    lifted = {}  # weight index -> (filter PrimFunc's GlobalVar, its output type)
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def find(expr):
        if isinstance(expr, Call) and expr.op.same_as(call_tir) and _is_filter_transform(mod[expr.args[0]]):
            arg = expr.args[1].fields[0]
            if arg in weights and uses.get(arg) == 1:
                lifted[weights[arg]] = (expr.args[0], expr.ty)
    relax.analysis.post_order_visit(main.body, find)
    if not lifted:
        return mod
    transform = mod[names[_TRANSFORM_PARAMS]]
    builder = relax.BlockBuilder(mod)
    inner = builder.add_func(transform.with_attr("global_symbol", _TRANSFORM_PARAMS + "_weights"),
                             _TRANSFORM_PARAMS + "_weights")
    packed = relax.Var("params", transform.params[0].ty)
    with builder.function(_TRANSFORM_PARAMS + "_winograd", [packed], attrs=dict(transform.attrs), pure=True):
        out = builder.emit(relax.Call(inner, [packed]))
        items = []
        for i in range(len(transform.params[0].ty.fields)):
            item = builder.emit(relax.TupleGetItem(out, i))
            if i in lifted:
                item = builder.emit(relax.call_tir(lifted[i][0], [item], lifted[i][1]))
            items.append(item)
        builder.emit_func_output(relax.Tuple(items))
    mod = builder.get()
    wrapper = mod.get_global_var(_TRANSFORM_PARAMS + "_winograd")
    mod[names[_TRANSFORM_PARAMS]] = mod[wrapper]
    del mod[wrapper]
    new_params = list(main.params)
    for i, (_, ty) in lifted.items():
        new_params[num_input + i] = relax.Var(main.params[num_input + i].name + "_winograd", ty)
    replaced = {main.params[num_input + i]: new_params[num_input + i] for i in lifted}
    body = _LiftedFilters(replaced).visit_expr(main.body)
    mod[mod.get_global_var("main")] = relax.Function(new_params, body, main.ret_ty, main.is_pure, main.attrs)
    return mod


def _is_filter_transform(func) -> bool:
    """Whether ``func`` is a PrimFunc of :func:`filter_transform` (its block's annotation)."""
    if not isinstance(func, tvm.tirx.PrimFunc):
        return False
    found: list = []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, found.append), order="post")
    return any(str(b.annotations.get("schedule_rule", "")) == FILTER_RULE for b in found)


@expr_functor.mutator
class _LiftedFilters(PyExprMutator):
    """``main``'s body with each lifted filter transform ``call_tir(winograd_filter, (w,))`` read
    from its new parameter instead."""

    def __init__(self, replaced: dict):
        super().__init__()
        self.replaced = replaced

    def visit_call_(self, call: Call) -> Expr:
        if call.op.same_as(tvm.ir.Op.get("relax.call_tir")) and len(call.args[1].fields) == 1 and \
                call.args[1].fields[0] in self.replaced:
            return self.replaced[call.args[1].fields[0]]
        return super().visit_call_(call)


__all__ = ["MODES", "WINOGRAD", "WinogradConv2d", "decide", "eligible_shape"]
