"""Fold a graph's shape arithmetic into constants once its input shapes are static.

Exporters trace ``x.size(0)``, ``expand(-1, ...)`` and mask building into chains of
Shape/Gather/Concat/Reshape/Where/Range/ConstantOfShape nodes. At a fixed batch every value in
such a chain is a constant, but TVM 0.27's ONNX importer does not always see that (it fails on
GPT-2's ``Expand(x, Where(Equal(shape, -1), 1, shape))`` and BERT's token-type buffer). This pass
computes those values ahead, exactly, with onnx's reference evaluator, and replaces each folded
node by a ``Constant``: ``Shape`` of a tensor whose shape onnx's shape inference knows, and any
node whose inputs are all constants, small ones only (no weight is read or folded: stripped
initializers have no values). It never touches arithmetic on inputs or weights; constants it
folds are computed by numpy, whose sin/cos/exp may differ from a runtime's in the last bit (on
LLaMA's rotary tables: outputs differ by 4e-6 at a scale of 5 in onnxruntime; every other corpus
model gives identical outputs folded and unfolded).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

#: folded results above this many elements stay nodes (masks of a 128-token sequence fold)
MAX_FOLD_ELEMENTS = 1 << 20
#: ops never folded: control flow, randomness, and ops with subgraphs
_NEVER = {"If", "Loop", "Scan", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
          "Multinomial", "Bernoulli", "Dropout"}


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Name -> fully static shape, from inputs, initializers and onnx's shape inference."""
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
    for t in model.graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _constant_values(graph: onnx.GraphProto, is_stripped) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer if not is_stripped(t)}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _evaluate(node: onnx.NodeProto, inputs: list, opset: int) -> list | None:
    from onnx.reference import ReferenceEvaluator  # pylint: disable=import-outside-toplevel

    names = [f"i{k}" for k in range(len(inputs))]
    renamed = helper.make_node(node.op_type, [n if node.input[k] else "" for k, n in enumerate(names)],
                               [f"o{k}" for k in range(len(node.output))], domain=node.domain)
    renamed.attribute.extend(node.attribute)
    feeds = {n: v for n, v in zip(names, inputs) if v is not None}
    graph = helper.make_graph([renamed], "fold", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
        v.dtype), v.shape) for n, v in feeds.items()], [helper.make_value_info(f"o{k}", onnx.TypeProto())
                                                         for k in range(len(node.output))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        with np.errstate(all="ignore"):  # e.g. T5's log(0) in a branch a Where then drops, as torch does
            return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]
    except Exception:  # pylint: disable=broad-except  (an op the evaluator lacks stays a node)
        return None


def _fold_once(model: onnx.ModelProto, is_stripped, opset: int) -> int:
    graph = model.graph
    shapes = _static_shapes(model)
    values = _constant_values(graph, is_stripped)
    folded, nodes = 0, []
    for node in graph.node:
        outs = None
        if node.op_type == "Constant" or node.op_type in _NEVER or node.domain not in ("", "ai.onnx"):
            pass
        elif node.op_type == "Shape" and node.input[0] in shapes:
            attrs = {a.name: a.i for a in node.attribute}
            outs = [np.array(shapes[node.input[0]][attrs.get("start", 0):attrs.get("end")], dtype=np.int64)]
        elif node.op_type == "Size" and node.input[0] in shapes:
            outs = [np.array(int(np.prod(shapes[node.input[0]])), dtype=np.int64)]
        elif all(not name or name in values for name in node.input) and any(node.input):
            outs = _evaluate(node, [values.get(name) if name else None for name in node.input], opset)
        if outs is not None and all(o.size <= MAX_FOLD_ELEMENTS for o in outs):
            for name, value in zip(node.output, outs):
                values[name] = value
                nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name)))
            folded += 1
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return folded


def _drop_dead(graph: onnx.GraphProto) -> None:
    live = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in live for o in node.output):
            keep.append(node)
            live.update(i for i in node.input if i)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    used = live
    kept_inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)


def fold_shapes(model: onnx.ModelProto, is_stripped=lambda t: False, rounds: int = 64) -> int:
    """Fold ``model`` in place (its inputs must have static shapes); the number of nodes folded.

    ``is_stripped(tensor)`` names initializers whose values must not be read (weights without data).
    """
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    total = 0
    for _ in range(rounds):
        folded = _fold_once(model, is_stripped, opset)
        total += folded
        if not folded:
            break
    _drop_dead(model.graph)
    del model.graph.value_info[:]
    return total
