"""What each PrimFunc and each candidate group costs, read from the TIR (never from op names).

Per PrimFunc: FLOPs (TVM's own ``estimate_tir_flops``), the bytes of its buffers, what kind of
computation its main block is (element-wise, row reduction, sliding-window reduction, or a
contraction such as a convolution or matmul, with its reduction extents), and how many values a
thread keeps live for one output element.

Per group: FLOPs, compulsory DRAM bytes (each external input read once, each output written once;
values inside the group stay on chip), arithmetic intensity, the regime on a profile (memory- or
compute-bound against its ridge point), and the bytes fusion saves.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir.analysis import estimate_tir_flops

from tvm_fusion_hw.hardware.profile import HardwareProfile

from .graph import COMM_REDUCE, OUT_EWISE_FUSABLE, PATTERN_NAMES, DataflowGraph, Node

# Kinds of computation (the anchor block of a PrimFunc).
ELEMENTWISE = "elementwise"  # no reduction: element-wise, broadcast or injective
ROW_REDUCE = "reduce"  # reduction not tied to output position (mean, softmax, layer norm)
WINDOW_REDUCE = "window"  # sliding-window reduction of one input (pooling)
#: PrimFunc attribute: the extents of the window a kernel reduces over where its TIR writes each
#: output's window out as one sum instead of a reduction loop (the Winograd transforms); the kernel
#: is then a window reduction, as its loop form would be classified.
WINDOW_ATTR = "fusion_hw.window"
CONV = "conv"  # contraction over channels and a spatial window
DEPTHWISE_CONV = "depthwise_conv"  # contraction over a spatial window only
POINTWISE_CONV = "pointwise_conv"  # contraction over channels only (1x1 window)
MATMUL = "matmul"  # contraction over one axis
PROJECTION = "projection"  # a TupleGetItem: no computation, no kernel
CONTRACTIONS = (CONV, DEPTHWISE_CONV, POINTWISE_CONV, MATMUL)


def tensor_bytes(ty: tvm.ir.Type) -> int:
    """Bytes of a tensor (or a tuple of tensors) type with a static shape; 0 when unknown."""
    if isinstance(ty, relax.TupleType):
        return sum(tensor_bytes(field) for field in ty.fields)
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return 0
    try:
        elements = math.prod(int(dim) for dim in shape.values)
    except (TypeError, ValueError):  # symbolic dimension
        return 0
    return elements * tvm.DataType(ty.dtype).bits // 8


def is_symbolic(ty: tvm.ir.Type) -> bool:
    """Whether a tensor (or tuple) type has a dimension that is not a constant (a dynamic batch)."""
    if isinstance(ty, relax.TupleType):
        return any(is_symbolic(field) for field in ty.fields)
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    return values is not None and any(not isinstance(dim, tvm.tirx.IntImm) for dim in values)


def tensor_elements(ty: tvm.ir.Type) -> int:
    """Elements of a tensor type with a static shape (a tuple: all fields); -1 when unknown."""
    if isinstance(ty, relax.TupleType):
        counts = [tensor_elements(field) for field in ty.fields]
        return -1 if -1 in counts else sum(counts)
    shape = tensor_shape(ty)
    return -1 if shape is None else math.prod(shape)


def tensor_shape(ty: tvm.ir.Type) -> Optional[Tuple[int, ...]]:
    """Static shape of a tensor type, or None."""
    shape = getattr(ty, "shape", None)
    try:
        return tuple(int(dim) for dim in shape.values)
    except (AttributeError, TypeError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class FuncInfo:  # pylint: disable=too-many-instance-attributes
    """What one PrimFunc computes and costs."""

    name: str
    pattern: int
    kind: str
    flops: float
    input_bytes: int
    output_bytes: int
    #: reduction extents of the anchor block, outermost first (e.g. (C, KH, KW) for a conv)
    reduction_extents: Tuple[int, ...]
    #: loads a thread holds per output element (a proxy for live registers)
    loads_per_output: int
    #: element size of the output, bytes
    element_bytes: int
    #: inputs (by position) read element for element at the output's index: a consumer that is
    #: element-wise in them even when TVM annotates it injective (batch_norm's tuple output)
    pointwise_inputs: Tuple[int, ...] = ()
    #: a dimension of a parameter is symbolic: its bytes and FLOPs are unknown, not 0
    symbolic: bool = False
    #: the PrimFunc itself, for the schedule templates' own checks (not part of the figures)
    func: Optional[tvm.tirx.PrimFunc] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def pattern_name(self) -> str:
        return PATTERN_NAMES.get(self.pattern, str(self.pattern))

    @property
    def is_complex(self) -> bool:
        """Ops whose outputs each depend on many inputs: TVM's kOutEWiseFusable and reductions."""
        return self.pattern in (COMM_REDUCE, OUT_EWISE_FUSABLE)

    @property
    def window(self) -> Tuple[int, ...]:
        """The spatial window of a convolution or pooling (last two reduction extents)."""
        return self.reduction_extents[-2:] if len(self.reduction_extents) >= 2 else ()


def _blocks(func: tvm.tirx.PrimFunc) -> List[tvm.s_tir.SBlock]:
    found: List[tvm.s_tir.SBlock] = []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, found.append), order="post")
    return [block for block in found if block.name_hint != "root"]


def _loads(stmt) -> List[tvm.ir.TensorLoad]:
    found: List[tvm.ir.TensorLoad] = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.TensorLoad, found.append), order="post")
    return found


def _vars(expr) -> set:
    found: List[tvm.tirx.Var] = []
    tvm_ffi.structural_walk(expr, (tvm.tirx.Var, found.append), order="post")
    return {str(v) for v in found}


def _classify_reduction(block: tvm.s_tir.SBlock) -> Tuple[str, Tuple[int, ...]]:
    spatial = {str(iv.var) for iv in block.iter_vars if int(iv.iter_type) == 0}
    reduced = [iv for iv in block.iter_vars if int(iv.iter_type) == 2]
    extents = tuple(int(iv.dom.extent) if isinstance(iv.dom.extent, tvm.tirx.IntImm) else -1 for iv in reduced)
    reduced_names = {str(iv.var) for iv in reduced}
    out_buffers = {w.source.name for w in block.writes}
    inputs = [load for load in _loads(block.body) if load.source.name not in out_buffers]
    if len({load.source.name for load in inputs}) >= 2:
        # Multiply-accumulate of two operands: a contraction. The window is the last two
        # reduction axes, the channel axis anything before them.
        if len(extents) == 1:
            return MATMUL, extents
        channels = math.prod(extents[:-2]) if len(extents) > 2 else 1
        window = math.prod(extents[-2:])
        if channels == 1 and window > 1:
            return DEPTHWISE_CONV, extents
        if window == 1:
            return POINTWISE_CONV, extents
        return CONV, extents
    for load in inputs:
        for index in load.indices:
            names = _vars(index)
            if names & spatial and names & reduced_names:
                return WINDOW_REDUCE, extents
    return ROW_REDUCE, extents


def projection_info(name: str) -> FuncInfo:
    """A TupleGetItem costs nothing: it names one output of its source."""
    return FuncInfo(name, 0, PROJECTION, 0.0, 0, 0, (), 0, 4)


def _pointwise_inputs(func: tvm.tirx.PrimFunc, params, num_outputs: int, blocks) -> Tuple[int, ...]:
    """Inputs with the first output's shape that every block reads at its own spatial indices."""
    out_shape = [str(d) for d in params[-num_outputs].ty.shape]
    found = []
    for position, param in enumerate(params[:-num_outputs]):
        if [str(d) for d in param.ty.shape] != out_shape:
            continue
        identity = True
        for block in blocks:
            names = [str(iv.var) for iv in block.iter_vars if int(iv.iter_type) == 0]
            for load in _loads(block.body):
                if load.source.name == param.name and [str(i) for i in load.indices] != names:
                    identity = False
        if identity:
            found.append(position)
    return tuple(found)


def analyze_func(name: str, func: tvm.tirx.PrimFunc, pattern: int, num_outputs: int = 1) -> FuncInfo:
    """Read one PrimFunc's cost and kind from its TIR (outputs are its last ``num_outputs`` params)."""
    params = [p for p in func.params if hasattr(p.ty, "shape") and hasattr(p.ty, "dtype")]
    sizes = []
    symbolic = False
    for param in params:
        dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else 0 for d in param.ty.shape]
        symbolic = symbolic or any(not isinstance(d, tvm.tirx.IntImm) for d in param.ty.shape)
        sizes.append(math.prod(dims) * tvm.DataType(param.ty.dtype).bits // 8)
    try:
        flops = 0.0 if symbolic else float(estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception:  # pylint: disable=broad-except
        flops = 0.0  # an opaque body: count nothing rather than guess
    blocks = _blocks(func)
    reductions = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in b.iter_vars)]
    kind, extents = ELEMENTWISE, ()
    window = func.attrs.get(WINDOW_ATTR) if func.attrs is not None else None
    if window is not None:
        kind, extents = WINDOW_REDUCE, tuple(int(e) for e in window)
    elif reductions:
        anchor = max(reductions, key=lambda b: math.prod(int(iv.dom.extent) if isinstance(iv.dom.extent, tvm.tirx.IntImm) else 1 for iv in b.iter_vars))
        kind, extents = _classify_reduction(anchor)
    param_names = {p.name for p in params}
    loads = sum(1 for b in blocks for load in _loads(b.body) if load.source.name in param_names)
    element_bytes = tvm.DataType(params[-num_outputs].ty.dtype).bits // 8 if params else 4
    # Destination-passing style: the outputs are the last params.
    return FuncInfo(
        name=name,
        pattern=pattern,
        kind=kind,
        flops=flops,
        input_bytes=sum(sizes[:-num_outputs]),
        output_bytes=sum(sizes[-num_outputs:]),
        reduction_extents=extents,
        loads_per_output=max(loads, 1),
        element_bytes=max(element_bytes, 1),
        pointwise_inputs=() if reductions or not params else _pointwise_inputs(func, params, num_outputs, blocks),
        symbolic=symbolic,
        func=func,
    )


@dataclasses.dataclass(frozen=True)
class GroupCost:
    """Roofline figures of a set of nodes run as one kernel."""

    flops: float
    compulsory_bytes: int
    saved_bytes: int  # DRAM traffic removed by keeping internal values on chip
    live_values: int  # estimated values a thread keeps live
    members: int
    #: a tensor of the group has a symbolic dimension: FLOPs and bytes are unknown (not counted)
    symbolic: bool = False

    @property
    def intensity(self) -> float:
        """FLOP per byte of compulsory DRAM traffic."""
        return self.flops / self.compulsory_bytes if self.compulsory_bytes else 0.0

    def regime(self, profile: HardwareProfile) -> str:
        """'memory-bound' below the profile's ridge point, else 'compute-bound'; 'symbolic' when
        the figures are unknown."""
        if self.symbolic:
            return "symbolic"
        return "memory-bound" if self.intensity < profile.ridge_point_flop_per_byte else "compute-bound"

    def roofline_seconds(self, profile: HardwareProfile) -> float:
        """Lower bound on the kernel time: the larger of the compute and the memory time."""
        return max(
            self.flops / profile.peak_fp32_flop_per_s,
            self.compulsory_bytes / profile.dram_bytes_per_s,
        )


class GraphCosts:
    """Costs of the nodes of one dataflow graph, and of any group of them."""

    def __init__(self, mod: tvm.IRModule, graph: DataflowGraph):
        self.graph = graph
        self._infos: Dict[str, FuncInfo] = {}
        self.node_info: List[FuncInfo] = []
        for node in graph.nodes:
            if node.is_projection:
                self.node_info.append(projection_info(node.name))
                continue
            if node.name not in self._infos:
                self._infos[node.name] = analyze_func(node.name, node.prim_func, node.pattern,
                                                      node.num_outputs)
            self.node_info.append(self._infos[node.name])

    def info(self, node: Node) -> FuncInfo:
        return self.node_info[node.index]

    def group_cost(self, members: Iterable[int]) -> GroupCost:
        """FLOPs, compulsory bytes, saved bytes and live values of ``members`` fused."""
        nodes = [self.graph.nodes[i] for i in sorted(set(members))]
        member_vars = {node.var for node in nodes}
        inputs: Dict[relax.Expr, int] = {}
        for node in nodes:
            for arg in node_inputs(node):
                if arg not in member_vars and arg not in inputs:
                    inputs[arg] = tensor_bytes(arg.ty)
        outputs = 0
        saved = 0
        for node in nodes:
            size = tensor_bytes(node.var.ty)
            internal_readers = [c for c in node.consumers if self.graph.nodes[c].var in member_vars]
            external = node.escapes or len(internal_readers) < len(node.consumers)
            if external:
                outputs += size
            if internal_readers:
                # Unfused, this value is written once and read by each internal reader.
                saved += size * (len(internal_readers) + (0 if external else 1))
        live = sum(self.info(n).loads_per_output + 1 for n in nodes if not n.is_projection)
        symbolic = any(self.info(n).symbolic or is_symbolic(n.var.ty) for n in nodes)
        return GroupCost(
            flops=sum(self.info(n).flops for n in nodes),
            compulsory_bytes=sum(inputs.values()) + outputs,
            saved_bytes=saved,
            live_values=live,
            members=sum(1 for n in nodes if not n.is_projection),
            symbolic=symbolic,
        )


def node_inputs(node: Node) -> List[relax.Expr]:
    """The values a node reads: call_tir arguments, or a projection's tuple."""
    if node.is_projection:
        return [node.binding.value.tuple_value]
    return list(node.call.args[1].fields)


def describe(kinds: Sequence[str]) -> str:
    """'conv+elementwise' style label of a group's kinds, in order, without repeats."""
    out: List[str] = []
    for kind in kinds:
        if not out or out[-1] != kind:
            out.append(kind)
    return "+".join(out) if out else "empty"

