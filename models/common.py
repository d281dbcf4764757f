"""A small ONNX graph builder shared by the model files.

:class:`GraphBuilder` appends ONNX nodes one call at a time and creates every weight as a named
initializer drawn from one seeded ``np.random.default_rng``. Because the draws happen in a fixed
order and no name or value depends on anything but the arguments, two builds with the same seed
serialize to the same bytes.

Initialisation is chosen so that activations stay O(1) through deep nets in eval mode:
He-normal convolution weights (the inputs are mostly post-ReLU), LeCun-normal fully-connected
weights, and BatchNormalization statistics near identity (positive random variance).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: ONNX opset of every model here: 17 is the first with LayerNormalization.
OPSET = 17
#: IR version that goes with opset 17, so older runtimes can load the files as well.
IR_VERSION = 8


class GraphBuilder:
    """Builds one ONNX graph with seeded float32 initializers.

    Parameters
    ----------
    seed : int
        Seed of the ``np.random.default_rng`` all weights are drawn from.
    conv_bias : bool
        Give every convolution a bias input, even one followed by BatchNormalization
        (that is what a PyTorch export shows when conv and BN are kept apart but biased).
    """

    def __init__(self, seed: int = 0, conv_bias: bool = True):
        self.rng = np.random.default_rng(seed)
        self.conv_bias = conv_bias
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}
        self._shared: set[str] = set()

    # ------------------------------------------------------------------ naming and constants
    def fresh(self, prefix: str) -> str:
        """Return a new unique name ``prefix_<n>`` (counted per prefix, so names are stable)."""
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}_{n}"

    def const(self, name: str, value: np.ndarray, dtype=np.float32) -> str:
        """Add ``value`` as an initializer called ``name`` and return the name."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def shared_const(self, name: str, value) -> str:
        """Add a float32 constant used by many nodes (e.g. Clip bounds) once; return its name."""
        if name not in self._shared:
            self._shared.add(name)
            self.const(name, np.asarray(value))
        return name

    def normal(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        """Add a seeded normal initializer."""
        return self.const(name, self.rng.normal(mean, std, size=tuple(shape)))

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        """Add a seeded uniform initializer."""
        return self.const(name, self.rng.uniform(low, high, size=tuple(shape)))

    def input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input."""
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def op(self, op_type: str, inputs: Sequence[str], prefix: str | None = None, **attrs) -> str:
        """Append one single-output node and return its output name."""
        name = self.fresh(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    # ------------------------------------------------------------------ layers
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None,
             group: int = 1, bias: bool | None = None, gain: float = 2.0,
             prefix: str = "conv") -> str:
        """Conv2d with He-normal weights, std = sqrt(gain / fan_in).

        ``pad`` defaults to ``k // 2`` ("same" for odd kernels at stride 1). ``bias`` defaults
        to the builder's ``conv_bias``; the bias is small so BN or the next layer sees O(1) data.
        """
        name = self.fresh(prefix)
        pad = k // 2 if pad is None else pad
        fan_in = cin // group * k * k
        w = self.normal(f"{name}.weight", (cout, cin // group, k, k), np.sqrt(gain / fan_in))
        ins = [x, w]
        if self.conv_bias if bias is None else bias:
            ins.append(self.normal(f"{name}.bias", (cout,), 0.05))
        self.nodes.append(helper.make_node(
            "Conv", ins, [name], name=name, kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad, pad, pad, pad], dilations=[1, 1], group=group))
        return name

    def bn(self, x: str, c: int, gamma: tuple[float, float] = (0.8, 1.2),
           prefix: str = "bn") -> str:
        """Eval-mode BatchNormalization with near-identity random statistics.

        ``gamma`` is the uniform range of the scale: a residual branch passes a small range so
        the sum of branch and shortcut does not double the variance at every block.
        """
        name = self.fresh(prefix)
        scale = self.uniform(f"{name}.weight", (c,), *gamma)
        shift = self.normal(f"{name}.bias", (c,), 0.05)
        mean = self.normal(f"{name}.running_mean", (c,), 0.05)
        var = self.uniform(f"{name}.running_var", (c,), 0.8, 1.2)  # positive by construction
        self.nodes.append(helper.make_node(
            "BatchNormalization", [x, scale, shift, mean, var], [name], name=name,
            epsilon=1e-5, momentum=0.9))
        return name

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def relu6(self, x: str) -> str:
        """ReLU6 as ``Clip(x, 0, 6)`` (min and max are inputs since opset 11)."""
        lo, hi = self.shared_const("relu6.min", 0.0), self.shared_const("relu6.max", 6.0)
        return self.op("Clip", [x, lo, hi], prefix="relu6")

    def add(self, a: str, b: str) -> str:
        return self.op("Add", [a, b])

    def mul(self, a: str, b: str) -> str:
        return self.op("Mul", [a, b])

    def maxpool(self, x: str, k: int, stride: int, pad: int = 0, ceil_mode: int = 0) -> str:
        return self.op("MaxPool", [x], kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad, pad, pad, pad], ceil_mode=ceil_mode)

    def classifier(self, x: str, cin: int, classes: int) -> str:
        """GlobalAveragePool + Flatten + Gemm (LeCun-normal weights keep the logits O(1))."""
        pooled = self.op("Flatten", [self.op("GlobalAveragePool", [x])], axis=1)
        name = self.fresh("fc")
        w = self.normal(f"{name}.weight", (classes, cin), np.sqrt(1.0 / cin))
        b = self.normal(f"{name}.bias", (classes,), 0.05)
        self.nodes.append(helper.make_node("Gemm", [pooled, w, b], [name], name=name,
                                           alpha=1.0, beta=1.0, transA=0, transB=1))
        return name

    def linear(self, x: str, cin: int, cout: int, prefix: str = "linear") -> str:
        """MatMul + Add on the last axis, as PyTorch exports ``nn.Linear`` on 3-D input."""
        name = self.fresh(prefix)
        w = self.normal(f"{name}.weight", (cin, cout), np.sqrt(1.0 / cin))
        b = self.normal(f"{name}.bias", (cout,), 0.02)
        y = self.op("MatMul", [x, w], prefix=f"{name}.matmul")
        return self.op("Add", [y, b], prefix=f"{name}.add")

    def layernorm(self, x: str, c: int, eps: float = 1e-12, prefix: str = "ln") -> str:
        """LayerNormalization over the last axis (ONNX opset 17 op)."""
        name = self.fresh(prefix)
        gamma = self.normal(f"{name}.weight", (c,), 0.05, mean=1.0)
        beta = self.normal(f"{name}.bias", (c,), 0.02)
        self.nodes.append(helper.make_node("LayerNormalization", [x, gamma, beta], [name],
                                           name=name, axis=-1, epsilon=eps))
        return name

    # ------------------------------------------------------------------ model
    def model(self, output: str, shape: Sequence[int], graph_name: str,
              doc: str = "") -> onnx.ModelProto:
        """Wrap the nodes into an opset-17 ``ModelProto`` whose one output is named ``output``.

        The tensor ``output`` (produced by the last node) is renamed to ``"output"`` so every
        model here has the same input and output names.
        """
        for node in self.nodes:
            node.output[:] = ["output" if o == output else o for o in node.output]
            node.input[:] = ["output" if i == output else i for i in node.input]
        out = helper.make_tensor_value_info("output", TensorProto.FLOAT, list(shape))
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, [out],
                                  initializer=self.initializers, doc_string=doc)
        model = helper.make_model(graph, producer_name="tvm_fusion_hw.models",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model


def num_params(model: onnx.ModelProto, buffers: bool = False) -> int:
    """Number of learnable float weights in ``model`` (as ``torch`` counts ``parameters()``).

    BatchNormalization running statistics are buffers, not parameters: counted only with
    ``buffers=True``. Integer shape constants and scalars (Clip bounds) are never counted.
    """
    total = 0
    for t in model.graph.initializer:
        if t.data_type != TensorProto.FLOAT or len(t.dims) == 0:
            continue
        if not buffers and ".running_" in t.name:
            continue
        total += int(np.prod(t.dims))
    return total


def example_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 arrays for every graph input of ``model``."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            out[vi.name] = rng.standard_normal(dims, dtype=np.float32)
    return out
