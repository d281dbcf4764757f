"""The dataflow graph the partitioner works on: one node per ``call_tir`` binding.

After ``LegalizeOps`` and ``AnnotateTIROpPattern`` every tensor operator of a Relax function is a
``R.call_tir`` of a PrimFunc that carries an ``op_pattern`` attribute. Those bindings are the
nodes; an edge runs from the binding that defines a value to each binding that reads it. Every
other binding (tuples, shape ops, packed calls) is a boundary that no group crosses.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Set

import tvm
from tvm import relax

CALL_TIR = tvm.ir.Op.get("relax.call_tir")

# TVM's OpPatternKind (include/tvm/relax/op_attr_types.h).
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8
PATTERN_NAMES = {
    ELEMWISE: "elemwise",
    BROADCAST: "broadcast",
    INJECTIVE: "injective",
    COMM_REDUCE: "reduce",
    OUT_EWISE_FUSABLE: "complex",
    TUPLE: "tuple",
    OPAQUE: "opaque",
}


@dataclasses.dataclass
class Node:
    """One ``call_tir`` binding."""

    index: int  # position among the function's bindings
    binding: relax.VarBinding
    prim_func_name: str
    prim_func: Optional[tvm.tirx.PrimFunc]  # None for a projection (TupleGetItem) node
    pattern: int
    producers: List[int] = dataclasses.field(default_factory=list)
    consumers: List[int] = dataclasses.field(default_factory=list)
    #: the value is read by something that is not a call_tir node (or is the function's output)
    escapes: bool = False

    @property
    def var(self) -> relax.Var:
        return self.binding.var

    @property
    def call(self) -> relax.Call:
        return self.binding.value

    @property
    def name(self) -> str:
        return self.prim_func_name

    @property
    def is_projection(self) -> bool:
        """A TupleGetItem of a multi-output call_tir: it always lives in its source's group."""
        return self.prim_func is None

    @property
    def num_outputs(self) -> int:
        out = self.call.ty_args[0] if not self.is_projection and self.call.ty_args else None
        return len(out.fields) if isinstance(out, relax.TupleType) else 1


@dataclasses.dataclass
class DataflowGraph:
    """The call_tir nodes of one dataflow block, in binding (topological) order."""

    block_index: int
    nodes: List[Node]
    by_var: Dict[relax.Var, int]

    def topological(self) -> List[Node]:
        return list(self.nodes)


def _used_vars(expr: relax.Expr) -> List[relax.Var]:
    return list(relax.analysis.free_vars(expr))


def _pattern_of(func: tvm.tirx.PrimFunc) -> int:
    if func.attrs is None or "op_pattern" not in func.attrs:
        return OPAQUE
    return int(func.attrs["op_pattern"])


def build_graphs(mod: tvm.IRModule, func_name: str = "main") -> List[DataflowGraph]:
    """Build one graph per dataflow block of ``mod[func_name]``."""
    func = mod[func_name]
    graphs = []
    body = func.body
    for block_index, block in enumerate(body.blocks):
        if not isinstance(block, relax.DataflowBlock):
            continue
        nodes: List[Node] = []
        by_var: Dict[relax.Var, int] = {}
        readers: Dict[relax.Var, Set[Optional[int]]] = {}
        for binding in block.bindings:
            value = binding.value
            node_id: Optional[int] = None
            if (
                isinstance(binding, relax.VarBinding)
                and isinstance(value, relax.Call)
                and value.op.same_as(CALL_TIR)
                and isinstance(value.args[0], tvm.ir.GlobalVar)
            ):
                callee = mod[value.args[0]]
                if isinstance(callee, tvm.tirx.PrimFunc):
                    node_id = len(nodes)
                    nodes.append(
                        Node(
                            index=node_id,
                            binding=binding,
                            prim_func_name=value.args[0].name_hint,
                            prim_func=callee,
                            pattern=_pattern_of(callee),
                        )
                    )
                    by_var[binding.var] = node_id
            elif (
                isinstance(binding, relax.VarBinding)
                and isinstance(value, relax.TupleGetItem)
                and isinstance(value.tuple_value, relax.Var)
                and value.tuple_value in by_var
            ):
                # A projection of a multi-output PrimFunc (batch_norm returns a tuple).
                source = nodes[by_var[value.tuple_value]]
                node_id = len(nodes)
                nodes.append(Node(node_id, binding, f"{source.name}[{value.index}]", None, ELEMWISE))
                by_var[binding.var] = node_id
            for var in _used_vars(value):
                readers.setdefault(var, set()).add(node_id)
        # Values read after the block (by later blocks or the return value) escape it.
        for later in list(body.blocks[block_index + 1 :]) + [body.body]:
            for var in _used_vars(later if not isinstance(later, relax.BindingBlock) else _block_expr(later)):
                readers.setdefault(var, set()).add(None)
        for var, node_id in by_var.items():
            node = nodes[node_id]
            for reader in sorted(readers.get(var, set()), key=lambda r: -1 if r is None else r):
                if reader is None:
                    node.escapes = True
                elif reader not in node.consumers:
                    node.consumers.append(reader)
                    nodes[reader].producers.append(node_id)
        graphs.append(DataflowGraph(block_index, nodes, by_var))
    return graphs


def _block_expr(block: relax.BindingBlock) -> relax.Expr:
    """A tuple of every value bound in ``block``: what it reads, for free-variable analysis."""
    return relax.Tuple([b.value for b in block.bindings if isinstance(b, relax.VarBinding)])
