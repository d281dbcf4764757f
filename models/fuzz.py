"""Random ONNX graphs for differential testing of the plugin against stock TVM (NNSmith-style).

A graph is described by a :class:`Program`: a weight seed, the input shapes and a list of steps
(``[op, args, params]``, see :mod:`.fuzz_ops` and :mod:`.fuzz_nodes`), all plain JSON. :func:`generate` draws a program
from a *chooser*, an object with ``int(lo, hi)``, ``pick(seq)`` and ``flip(p)``:
:class:`RandomChooser` draws from a seeded numpy generator (used on machines without
hypothesis, e.g. for the GPU bundle's seed set), and the hypothesis strategy
:func:`programs` draws through hypothesis so that failures shrink to small graphs.
:func:`build_model` turns a program into an opset-17 float32 ``onnx.ModelProto``; the same program
always serializes to the same bytes.

A step is one operator (:mod:`.fuzz_ops`); about a third of the draws are a *motif* instead
(:mod:`.fuzz_motifs`: conv block with pool, depthwise then pointwise, residual, squeeze-and-
excitation, MLP, attention, channel shuffle, inception branches), several steps in a row.
Every step is checked by ONNX shape inference as it is drawn; a step that ONNX rejects, or whose
tensors or arithmetic would be too large (:data:`~.fuzz_ops.MAX_ELEMS`,
:data:`~.fuzz_ops.MAX_MACS`), or whose magnitude estimate could overflow, is dropped and another
drawn. Graph outputs are the values no later step reads, plus any a step ``expose`` names.

>>> from tvm_fusion_hw.models.fuzz import RandomChooser, generate, build_model, seed_models
>>> model = build_model(generate(RandomChooser(0)))
>>> names = [name for name, _ in seed_models(8)]    # the regression graphs, then seeds 0..7
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import TensorProto, helper

from tvm_fusion_hw.errors import FusionHWError

from .common import IR_VERSION, OPSET, GraphBuilder
from .fuzz_motifs import MOTIF_TABLE, MOTIFS
from .fuzz_nodes import OP_TABLE, OPS
from .fuzz_ops import LARGE_MAX_ELEMS, LARGE_MAX_MACS, LARGE_SIZES, MAX_BOUND, MAX_ELEMS, MAX_MACS, SIZES, Value

#: batch sizes of the main input (its first axis)
BATCHES = (1, 2, 3, 1, 4, 5)
#: steps (or motifs: several steps) a generated graph has at most
MAX_STEPS = 6
#: how often a step is a motif (:mod:`.fuzz_motifs`) rather than one operator
MOTIF_RATE = 0.3


# ---------------------------------------------------------------------------------- choosers
class RandomChooser:
    """Draws from ``np.random.default_rng(seed)``."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def int(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]``."""
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq: Sequence):
        return seq[self.int(0, len(seq) - 1)]

    def flip(self, p: float) -> bool:
        return bool(self.rng.random() < p)


class DataChooser:
    """Draws through hypothesis' ``draw`` (from ``st.composite`` or ``st.data()``); every
    choice shrinks towards its first option, ``flip`` towards False."""

    def __init__(self, draw):
        from hypothesis import strategies as st  # pylint: disable=import-outside-toplevel

        self._draw, self._st = draw, st

    def int(self, lo: int, hi: int) -> int:
        return self._draw(self._st.integers(lo, hi))

    def pick(self, seq: Sequence):
        return seq[self.int(0, len(seq) - 1)]

    def flip(self, p: float) -> bool:
        return self.int(0, 99) >= round(100 * (1 - p))


# ---------------------------------------------------------------------------------- programs
@dataclasses.dataclass
class Program:
    """A fuzz graph: weight seed, input shapes (the first is ``input``, batch first), steps."""

    seed: int
    inputs: List[List[int]]
    steps: List[list]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Program":
        return cls(**json.loads(text))


class FuzzGraph:
    """The graph while steps are applied: its values, the ONNX nodes (a GraphBuilder), the steps.

    Weights of step ``i`` come from ``default_rng([seed, i])``, so a step draws the same weights
    whether it is applied while generating or when a program is rebuilt. ``large`` draws from
    :data:`~.fuzz_ops.LARGE_SIZES` under the ``LARGE_`` limits (graphs that are only compiled).
    """

    def __init__(self, seed: int, inputs: Sequence[Sequence[int]], large: bool = False):
        self.seed = seed
        self.sizes = LARGE_SIZES if large else SIZES
        self.max_elems = LARGE_MAX_ELEMS if large else MAX_ELEMS
        self.max_macs = LARGE_MAX_MACS if large else MAX_MACS
        self.g = GraphBuilder(seed)
        self.values: List[Value] = []
        self.steps: List[list] = []
        self.exposed: List[int] = []
        for shape in inputs:
            self.add_input(shape)

    # -- helpers the ops use
    def vid(self, value: Value) -> int:
        return next(i for i, v in enumerate(self.values) if v is value)

    def pool(self) -> List[Value]:
        """Values a step may read, newest first."""
        return self.values[::-1]

    def add_input(self, shape: Sequence[int]) -> Value:
        """A new graph input ``input`` / ``input_<n>`` of ``shape``, values in [-1, 1]."""
        n = sum(v.is_input for v in self.values)
        name = "input" if n == 0 else f"input_{n}"
        self.g.input(name, list(shape))
        value = Value(name, shape, 1.0, is_input=True)
        self.values.append(value)
        return value

    def node(self, op_type: str, inputs: Sequence[str], name: str, **attrs) -> str:
        """Append a node whose output is ``name`` (already made unique by ``g.fresh``)."""
        self.g.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    # -- applying steps
    def _snapshot(self):
        g = self.g
        return (len(g.nodes), len(g.initializers), len(g.inputs), dict(g._counts),  # pylint: disable=protected-access
                set(g._shared), len(self.values))  # pylint: disable=protected-access

    def _restore(self, snap):
        g = self.g
        del g.nodes[snap[0]:], g.initializers[snap[1]:], g.inputs[snap[2]:], self.values[snap[5]:]
        g._counts, g._shared = snap[3], snap[4]  # pylint: disable=protected-access

    def apply(self, step: list) -> bool:
        """Apply ``step``; False (and nothing changed) where ONNX or the size limits reject it."""
        op, args, params = step
        if op == "expose":
            if self.values[args[0]].is_input:
                return False
            self.exposed.append(args[0])
            self.steps.append(step)
            return True
        snap = self._snapshot()
        self.g.rng = np.random.default_rng([self.seed, len(self.steps)])
        try:
            operands = [self.values[i] for i in args]
            name, bound = OPS[op][1](self, self.g, operands, params)
            shape = self._infer(name)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError,
                IndexError, KeyError, ZeroDivisionError):
            shape = None
        if shape is None or min(shape, default=1) < 1 or int(np.prod(shape)) > self.max_elems \
                or not bound <= MAX_BOUND:
            self._restore(snap)
            return False
        self.values.append(Value(name, shape, bound))
        self.steps.append(step)
        return True

    def _infer(self, name: str) -> Optional[Tuple[int, ...]]:
        model = self._model([name])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        tensor = inferred.graph.output[0].type.tensor_type
        if not tensor.HasField("shape") or any(not d.HasField("dim_value") for d in tensor.shape.dim):
            return None
        return tuple(d.dim_value for d in tensor.shape.dim)

    def _model(self, outputs: Sequence[str], shapes: Optional[Dict[str, Tuple[int, ...]]] = None,
               name: str = "fuzz") -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, (shapes or {}).get(o)) for o in outputs]
        graph = helper.make_graph(list(self.g.nodes), name, list(self.g.inputs), outs,
                                  initializer=list(self.g.initializers))
        model = helper.make_model(graph, producer_name="tvm_fusion_hw.models.fuzz",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model

    def output_ids(self) -> List[int]:
        """Values that are graph outputs: those no step reads, then the exposed ones."""
        read = {i for op, args, _ in self.steps if op != "expose" for i in args}
        leaves = [i for i, v in enumerate(self.values) if not v.is_input and i not in read]
        return leaves + [i for i in dict.fromkeys(self.exposed) if i not in leaves]

    def model(self, name: str = "fuzz") -> onnx.ModelProto:
        ids = self.output_ids()
        values = [self.values[i] for i in ids]
        return self._model([v.name for v in values], {v.name: v.shape for v in values}, name)

    def program(self) -> Program:
        inputs = [list(v.shape) for v in self.values if v.is_input][:1]
        return Program(self.seed, inputs, copy.deepcopy(self.steps))


def generate(ch, max_steps: int = MAX_STEPS, large: bool = False) -> Program:
    """Draw a program from chooser ``ch``: an input of rank 2 to 4 (batch first), then up to
    ``max_steps`` steps, each reading the newest value or, less often, an earlier one. ``large``:
    bigger sizes and limits (:class:`FuzzGraph`), for graphs that are compiled but not run."""
    seed = ch.int(0, 9999)
    rank = ch.pick([4, 3, 2, 4, 4])
    graph = FuzzGraph(seed, [], large)
    shape = [ch.pick(BATCHES)] + [ch.pick(graph.sizes) for _ in range(rank - 1)]
    while int(np.prod(shape)) > graph.max_elems // 4:
        shape[int(np.argmax(shape))] //= 2
    graph.add_input(shape)
    for _ in range(ch.int(1, max_steps)):
        for _attempt in range(4):
            pool = [v for v in graph.pool() if not v.is_input] or graph.pool()
            a = pool[0] if not ch.flip(0.35) else graph.pool()[ch.int(0, len(graph.values) - 1)]
            if ch.flip(MOTIF_RATE):
                applied = 0
                for step in MOTIFS[ch.pick(MOTIF_TABLE)][0](graph, ch, a):
                    if not graph.apply(step):
                        break
                    applied += 1
                if applied:
                    break
                continue
            op = ch.pick(OP_TABLE)
            proposal = OPS[op][0](graph, ch, a)
            if proposal is not None and graph.apply([op, *proposal]):
                break
        if len(graph.steps) and ch.flip(0.1):
            ids = [i for i, v in enumerate(graph.values) if not v.is_input]
            graph.apply(["expose", [ids[ch.int(0, len(ids) - 1)]], {}])
    if not graph.steps:
        graph.apply(["relu", [0], {}])
    return graph.program()


def build_model(program: Program, name: str = "fuzz") -> onnx.ModelProto:
    """The ONNX model of ``program`` (opset 17, float32, static shapes)."""
    graph = FuzzGraph(program.seed, program.inputs, large=True)  # its steps were checked when drawn
    for step in program.steps:
        if not graph.apply(copy.deepcopy(step)):
            raise ValueError(f"step {step} of the program does not apply")
    return graph.model(name)


def example_inputs(model: onnx.ModelProto, seed: int = 0, scale: float = 1.0) -> Dict[str, np.ndarray]:
    """Seeded float32 inputs, uniform in ``[-scale, scale]``, for every graph input of ``model``."""
    rng = np.random.default_rng(seed)
    return {vi.name: rng.uniform(-scale, scale, [d.dim_value for d in vi.type.tensor_type.shape.dim])
            .astype(np.float32) for vi in model.graph.input}


def programs(max_steps: int = MAX_STEPS, large: bool = False):
    """hypothesis strategy of :class:`Program` (needs hypothesis; nothing else here does)."""
    from hypothesis import strategies as st  # pylint: disable=import-outside-toplevel

    @st.composite
    def _programs(draw):
        return generate(DataChooser(draw), max_steps, large)

    return _programs()


# ---------------------------------------------------------------------------------- seed set
def _conv(cout, group, kernel, strides, pads, dilations=None, bias=False, args=None):
    return ["conv", args, {"cout": cout, "group": group, "kernel": kernel, "strides": strides,
                           "dilations": dilations or [1] * len(kernel), "pads": pads, "bias": bias}]


def _chain(seed, shape, *steps):
    """A program whose steps each read the value before (``args`` None) or name theirs."""
    out = []
    for i, (op, args, params) in enumerate(steps):
        out.append([op, [i] if args is None else args, params])
    return Program(seed, [list(shape)], out)


#: Graphs that once failed (what went wrong: tests/test_fuzz.py, ``REGRESSION_NOTES``).
REGRESSIONS: Dict[str, Program] = {
    # squeeze-and-excitation at batch 5: the gate's multiply was a GEMM epilogue (campaign seed 9)
    "se_gate_epilogue": Program(4215, [[5, 5, 2, 13]], [
        ["global_pool", [0], {"op": "GlobalMaxPool"}],
        ["pool", [0], {"op": "AveragePool", "kernel": [1, 4], "strides": [1, 1], "pads": [0, 1, 0, 3],
                       "ceil_mode": 0, "count_include_pad": 0}],
        ["global_pool", [2], {"op": "GlobalAveragePool"}],
        _conv(5, 1, [1, 1], [1, 1], [0, 0, 0, 0], args=[3]),
        ["silu", [4], {}],
        _conv(5, 1, [1, 1], [1, 1], [0, 0, 0, 0], args=[5]),
        ["sigmoid", [6], {}],
        ["mul", [2, 7], {"other": "value", "swap": True}],
        ["batchnorm", [8], {"eps": 1e-05}],
        ["global_pool", [2], {"op": "GlobalAveragePool"}],
        _conv(5, 1, [1, 1], [1, 1], [0, 0, 0, 0], args=[10]),
        ["relu", [11], {}],
        _conv(5, 1, [1, 1], [1, 1], [0, 0, 0, 0], args=[12]),
        ["sigmoid", [13], {}],
        ["mul", [2, 14], {"other": "value", "swap": True}]]),
    # a conv epilogue that broadcasts the conv's [1, 17, 2, 1] to [1, 17, 2, 31] (campaign seed 37)
    "broadcast_epilogue": _chain(
        1595, [1, 16, 4, 1],
        _conv(32, 1, [1, 1], [2, 2], [0, 0, 0, 0]),
        _conv(32, 32, [1, 3], [1, 1], [0, 1, 0, 1]),
        ["batchnorm", None, {"eps": 1e-05}],
        ["silu", None, {}],
        _conv(17, 1, [1, 1], [1, 1], [0, 0, 0, 0], bias=True),
        ["batchnorm", None, {"eps": 1e-05}],
        _conv(17, 17, [7, 1], [1, 1], [3, 0, 3, 0], bias=True),
        ["add", None, {"other": "const", "shape": [17, 1, 1], "swap": False}],
        _conv(17, 1, [1, 1], [1, 1], [0, 0, 0, 0], dilations=[2, 1]),
        ["sub", None, {"other": "const", "shape": [17, 1, 1], "swap": True}],
        ["clip", None, {"min": -0.25, "max": None}],
        ["add", None, {"other": "const", "shape": [1, 1, 1, 31], "swap": True}]),
    # conv -> BatchNormalization -> relu -> max pool: BN must stay the conv's epilogue
    "conv_bn_relu_pool": _chain(
        0, [5, 11, 16, 16],
        _conv(16, 1, [7, 7], [2, 2], [0, 0, 0, 0]),
        ["batchnorm", None, {"eps": 1e-5}],
        ["relu", None, {}],
        ["pool", None, {"op": "MaxPool", "kernel": [3, 3], "strides": [2, 2], "pads": [0, 0, 0, 0],
                        "ceil_mode": 0, "dilations": [1, 1]}]),
    # grouped conv without padding: dlight's reduction schedule fails to lower (stock too)
    "grouped_conv2d_unpadded": _chain(0, [1, 4, 6, 6], _conv(4, 2, [3, 3], [1, 1], [0, 0, 0, 0])),
    "grouped_conv1d_strided": _chain(8375, [1, 5, 7], _conv(10, 5, [3], [2], [0, 0])),
    # depthwise conv1d with padding: stock TVM's dlight asserts; the plugin builds it
    "depthwise_conv1d_padded": _chain(0, [1, 5, 7], _conv(5, 5, [3], [1], [1, 1])),
    # a slice that keeps the indices (x[:, :, :1]) after a matmul: TVM annotates it element-wise
    # (the test suite's hypothesis run, 2026-12-04)
    "matmul_slice_epilogue": Program(0, [[1, 2, 2, 2]], [
        ["matmul", [0], {"b": "weight", "n": 2}],
        ["add", [1], {"other": "const", "shape": [2], "swap": False}],
        ["gelu", [2], {}],
        ["matmul", [3], {"b": "weight", "n": 2}],
        ["slice", [4], {"starts": [0], "ends": [1], "axes": [2], "steps": [1]}]]),
}


def seed_programs(n: int, max_steps: int = MAX_STEPS, large: bool = False) -> List[Tuple[str, Program]]:
    """The regression programs, then ``n`` programs drawn from seeds ``0 .. n-1``
    (``fuzz_seed<i>``, or ``fuzz_large<i>`` with ``large``: bigger graphs, see :func:`generate`)."""
    out = list(REGRESSIONS.items())
    tag = "large" if large else "seed"
    out += [(f"fuzz_{tag}{i:04d}", generate(RandomChooser(i), max_steps, large)) for i in range(n)]
    return out


def program_named(name: str) -> Program:
    """The program :func:`seed_programs` calls ``name`` (a regression, ``fuzz_seed<i>`` or
    ``fuzz_large<i>``), drawn again from its seed."""
    if name in REGRESSIONS:
        return REGRESSIONS[name]
    for tag, large in (("fuzz_seed", False), ("fuzz_large", True)):
        digits = name[len(tag):]
        if name.startswith(tag) and digits.isdigit():
            return generate(RandomChooser(int(digits)), MAX_STEPS, large)
    raise FusionHWError(f"unknown fuzz graph {name!r}: a regression ({', '.join(REGRESSIONS)}), "
                        f"fuzz_seed<N> or fuzz_large<N>")


def seed_models(n: int, max_steps: int = MAX_STEPS, large: bool = False) -> List[Tuple[str, onnx.ModelProto]]:
    """``(name, model)`` for the regression graphs and ``n`` seeded random graphs: the fixed set
    the GPU bundle runs against stock TVM (inputs: :func:`example_inputs`)."""
    return [(name, build_model(p, name)) for name, p in seed_programs(n, max_steps, large)]


def write_seed_models(folder: Union[str, Path], n: int, max_steps: int = MAX_STEPS,
                      large: bool = False) -> List[Path]:
    """Write :func:`seed_models` as ``<folder>/<name>.onnx`` with its program beside it
    (``<name>.json``); return the ONNX paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, program in seed_programs(n, max_steps, large):
        path = folder / f"{name}.onnx"
        onnx.save(build_model(program, name), str(path))
        (folder / f"{name}.json").write_text(program.to_json() + "\n", encoding="utf-8")
        paths.append(path)
    return paths
