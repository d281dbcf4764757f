"""HardwareAwareFuseOps: a drop-in for ``relax.transform.FuseOps`` driven by a hardware profile.

It runs where FuseOps runs (after ``LegalizeOps`` and ``AnnotateTIROpPattern``) and produces what
FuseOps produces: for each group of two or more ``call_tir`` bindings, a private Relax function
with ``{"Primitive": True}`` that ``relax.transform.FuseTIR`` merges into one PrimFunc. Which
bindings form a group is decided by :mod:`.partition` under :class:`.policy.FusionPolicy`; every
decision is kept in a :class:`.decisions.FusionReport`.
"""

from __future__ import annotations

import heapq
import warnings
from typing import Dict, List, Optional, Tuple, Union

import tvm
from tvm import relax

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.profile import HardwareProfile
from tvm_fusion_hw.hardware.target import resolve_profile
from tvm_fusion_hw.plans import NO_TEMPLATES, TemplatePlanners

from .analysis import GraphCosts, node_inputs
from .decisions import FusionReport, GroupSummary
from .graph import DataflowGraph, build_graphs
from .memo import ExactIRMemo
from .partition import Partition
from .policy import FusionPolicy, PolicyConfig

_LAST_REPORT: Optional[FusionReport] = None  # only for the deprecated last_report()


def last_report() -> Optional[FusionReport]:
    """The report of the most recent HardwareAwareFuseOps run in this process.

    Deprecated: read ``pipeline.fuse_pass.report`` of the pipeline :func:`tvm_fusion_hw.get_pipeline`
    returned (or ``.report`` of your own pass instance) instead; process-wide state mixes up
    concurrent builds. Kept for scripts written against earlier versions.
    """
    warnings.warn("tvm_fusion_hw.last_report() is deprecated: read pipeline.fuse_pass.report",
                  DeprecationWarning, stacklevel=2)
    return _LAST_REPORT


@tvm.transform.module_pass(opt_level=0, name="HardwareAwareFuseOps")
class HardwareAwareFuseOps:
    """Fuse operators with rules driven by the target's hardware.

    Parameters
    ----------
    target_or_profile : tvm.target.Target, HardwareProfile or str
        The GPU to fuse for: a Target made by :func:`tvm_fusion_hw.hardware.target`, a profile, or a
        profile name such as ``"nvidia-h200"``.
    planners : TemplatePlanners, optional
        What the schedule templates plan (:mod:`tvm_fusion_hw.plans`): which complex pairs a
        template runs as one kernel and with what resources. :func:`tvm_fusion_hw.get_pipeline`
        gives the plugin's (``tvm_fusion_hw.schedules.template_planners()``). Without it no
        complex pair fuses (no template would run it), as with stock FuseOps.
    plan_memo : ExactIRMemo, optional
        Where the templates' plans are remembered for the same PrimFuncs, target and PassContext
        (:mod:`.memo`; a part of several pairs is planned once). A new one when omitted; the
        pipeline hands its pass's memo to a pass that fuses the module again.
    **knobs
        Fields of :class:`PolicyConfig` (``target_occupancy``, ``max_occupancy_drop``,
        ``fuse_complex_pairs``, ``max_depth``, ...). The PassContext key
        ``relax.FuseOps.max_depth`` is honoured as an upper bound on ``max_depth``.

    After the pass has run, ``report`` holds the decisions.
    """

    def __init__(self, target_or_profile: Union[tvm.target.Target, HardwareProfile, str],
                 planners: TemplatePlanners = NO_TEMPLATES, *, plan_memo: Optional[ExactIRMemo] = None,
                 **knobs):
        self.profile = resolve_profile(target_or_profile)
        if not isinstance(planners, TemplatePlanners):
            raise FusionHWError(f"planners must be a tvm_fusion_hw.plans.TemplatePlanners, "
                                f"got {type(planners).__name__}")
        self.planners = planners
        unknown = set(knobs) - set(PolicyConfig.__dataclass_fields__)
        if unknown:
            raise FusionHWError(
                f"unknown knob '{sorted(unknown)[0]}'; known: {', '.join(PolicyConfig.__dataclass_fields__)}"
            )
        self.config = PolicyConfig(**knobs)
        self.plan_memo = ExactIRMemo() if plan_memo is None else plan_memo
        self.report: Optional[FusionReport] = None

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        global _LAST_REPORT  # pylint: disable=global-statement
        config = self.config
        stock_depth = ctx.config.get("relax.FuseOps.max_depth") if ctx.config else None
        if stock_depth is not None and int(stock_depth) < config.max_depth:
            config = PolicyConfig(**{**config.__dict__, "max_depth": int(stock_depth)})
        policy = FusionPolicy(self.profile, config, self.planners, self.plan_memo)
        report = FusionReport(profile=self.profile.name, budgets=policy.budgets())
        builder = relax.BlockBuilder(mod)
        for gvar, func in mod.functions.items():
            if not isinstance(func, relax.Function) or _is_primitive(func):
                continue
            new_func = _FunctionFuser(mod, builder, gvar.name_hint, policy, report).run()
            if new_func is not None:
                builder.update_func(gvar, new_func)
        self.report = _LAST_REPORT = report
        return relax.transform.Normalize()(builder.get())


def _is_primitive(func: relax.Function) -> bool:
    return func.attrs is not None and "Primitive" in func.attrs and bool(func.attrs["Primitive"])


class _FunctionFuser:
    """Groups the call_tir bindings of one Relax function and rewrites its dataflow blocks."""

    def __init__(self, mod, builder, name, policy: FusionPolicy, report: FusionReport):
        self.mod, self.builder, self.name = mod, builder, name
        self.policy, self.report = policy, report

    def run(self) -> Optional[relax.Function]:
        func = self.mod[self.name]
        if not isinstance(func.body, relax.SeqExpr):
            return None
        graphs = {g.block_index: g for g in build_graphs(self.mod, self.name)}
        blocks = []
        for index, block in enumerate(func.body.blocks):
            graph = graphs.get(index)
            blocks.append(self._fuse_block(block, graph) if graph and graph.nodes else block)
        return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty,
                              func.is_pure, func.attrs, func.span)

    def _fuse_block(self, block: relax.DataflowBlock, graph: DataflowGraph) -> relax.DataflowBlock:
        costs = GraphCosts(self.mod, graph)
        partition = Partition(graph, costs, self.policy).run()
        self.report.decisions.extend(partition.decisions)
        groups = partition.groups()
        self.kernels: Dict[Tuple[int, ...], str] = {}  # members -> the new function's name
        rewritten = self._rewrite(block, graph, [g for g in groups if len(g) > 1])
        for members in groups:
            view = partition.view(members)
            single = graph.nodes[members[0]].binding.value
            kernel = self.kernels.get(tuple(members)) or (
                single.args[0].name_hint if len(members) == 1 and isinstance(single, relax.Call) else "")
            self.report.groups.append(GroupSummary(
                name=view.label, members=[graph.nodes[i].name for i in members],
                kinds=partition.kinds(partition.group_of[members[0]]), flops=view.cost.flops,
                compulsory_bytes=view.cost.compulsory_bytes, intensity=round(view.cost.intensity, 3),
                regime=view.cost.regime(self.policy.profile),
                estimated_registers=self.policy.estimate_registers(view.infos),
                kernel=kernel, ops=list(view.ops)))
        return rewritten

    def _rewrite(self, block, graph: DataflowGraph, groups: List[List[int]]) -> relax.DataflowBlock:
        """Replace each group by a call of a new primitive function, keeping dependencies ordered."""
        binding_pos = {b.var: pos for pos, b in enumerate(block.bindings)}
        unit_of: Dict[int, int] = {}  # binding position -> unit id
        units: List[List[relax.Binding]] = []
        for members in groups:
            for i in members:
                unit_of[binding_pos[graph.nodes[i].var]] = len(units)
            units.append(self._group_call(graph, members))
        for pos, binding in enumerate(block.bindings):
            if pos not in unit_of:
                unit_of[pos] = len(units)
                units.append([binding])
        # Kahn's algorithm, earliest original binding first, so untouched code keeps its order.
        defined_by = {block.bindings[pos].var: unit for pos, unit in unit_of.items()}
        first_pos: Dict[int, int] = {}
        for pos, unit in unit_of.items():
            first_pos[unit] = min(first_pos.get(unit, pos), pos)
        deps: Dict[int, set] = {u: set() for u in range(len(units))}
        for pos, binding in enumerate(block.bindings):
            for var in relax.analysis.free_vars(binding.value):
                if var in defined_by and defined_by[var] != unit_of[pos]:
                    deps[unit_of[pos]].add(defined_by[var])
        users: Dict[int, List[int]] = {u: [] for u in deps}
        for unit, needs in deps.items():
            for need in needs:
                users[need].append(unit)
        ready = [(first_pos[u], u) for u, needs in deps.items() if not needs]
        heapq.heapify(ready)
        ordered: List[relax.Binding] = []
        while ready:
            _, unit = heapq.heappop(ready)
            ordered.extend(units[unit])
            for user in users[unit]:
                deps[user].discard(unit)
                if not deps[user]:
                    heapq.heappush(ready, (first_pos[user], user))
        if len(ordered) != sum(len(u) for u in units):
            raise RuntimeError("HardwareAwareFuseOps made a cyclic grouping; this is a bug")
        return relax.DataflowBlock(ordered, block.span)

    def _group_call(self, graph: DataflowGraph, members: List[int]) -> List[relax.Binding]:
        """Build the primitive function of one group; return the bindings that call it."""
        nodes = [graph.nodes[i] for i in members]
        member_vars = {n.var for n in nodes}
        params: List[relax.Var] = []
        args: List[relax.Expr] = []
        remap: Dict[relax.Expr, relax.Expr] = {}
        outputs = [n for n in nodes if n.escapes or any(graph.nodes[c].var not in member_vars for c in n.consumers)]
        bindings = []
        for node in nodes:
            new_args = []
            for arg in node_inputs(node):
                if arg not in member_vars and arg not in remap:
                    name = arg.name if isinstance(arg, relax.Var) else f"param_{len(params)}"
                    param = relax.Var(name, arg.ty)
                    params.append(param)
                    args.append(arg)
                    remap[arg] = param
                new_args.append(remap[arg])
            call = node.binding.value
            if node.is_projection:
                new_call = relax.TupleGetItem(new_args[0], call.index)
            else:
                new_call = relax.Call(call.op, [call.args[0], relax.Tuple(new_args)] + list(call.args[2:]),
                                      call.attrs, call.ty_args)
            var_type = relax.Var if node in outputs else relax.DataflowVar
            new_var = var_type(node.var.name, node.var.ty)
            remap[node.var] = new_var
            bindings.append(relax.VarBinding(new_var, new_call))
        out_vars = [remap[n.var] for n in outputs]
        ret = out_vars[0] if len(out_vars) == 1 else relax.Tuple(out_vars)
        ret_ty = out_vars[0].ty if len(out_vars) == 1 else relax.TupleType([v.ty for v in out_vars])
        func = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(bindings)], ret), ret_ty,
                              True, tvm.ir.make_node("ir.DictAttrs", Primitive=True))
        name = "fused_" + "_".join(dict.fromkeys(n.name for n in nodes if not n.is_projection))
        gvar = self.builder.add_func(func, name[:120])
        self.kernels[tuple(members)] = gvar.name_hint
        call = relax.Call(gvar, args)
        if len(outputs) == 1:
            return [relax.VarBinding(outputs[0].var, call)]
        tuple_var = relax.DataflowVar(f"{name[:40]}_out", ret_ty)
        result = [relax.VarBinding(tuple_var, call)]
        result += [relax.VarBinding(n.var, relax.TupleGetItem(tuple_var, k)) for k, n in enumerate(outputs)]
        return result
