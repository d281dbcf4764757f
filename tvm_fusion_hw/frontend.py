"""ONNX in, Relax out, with one-line errors for the usual mistakes.

``relax.frontend.onnx.from_onnx`` raises deep inside TVM for a file that is missing, is not ONNX,
or uses an operator it does not know; :func:`import_onnx` turns each into a
:class:`FusionHWError` that names the file. Two mistakes TVM's importer would not notice at all
are refused too (:func:`check_importable`): a node of an operator domain it does not read (it
matches operators by name alone, so ``com.example.Relu`` would become ONNX's Relu), and a node
whose opset predates every definition of its operator the importer implements (it then reads
the node as its oldest definition: an opset-1 ``Reshape`` with a ``shape`` attribute, an opset-10
``Resize`` whose second input is ``scales``, not ``roi``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional, Union

import onnx
import tvm
from google.protobuf.message import DecodeError

from .errors import FusionHWError

#: Operator domains TVM's importer reads: ONNX's own, and onnxruntime's contrib operators it
#: converts (Gelu, FastGelu, SkipLayerNormalization, ...). It ignores a node's domain otherwise.
IMPORTED_DOMAINS = ("", "ai.onnx", "com.microsoft")


def load_onnx(path: Union[str, Path]) -> onnx.ModelProto:
    """Read and check an ONNX file."""
    path = Path(path)
    if path.is_dir():
        raise FusionHWError(f"{path} is a directory, not an ONNX file")
    if not path.is_file():
        raise FusionHWError(f"ONNX file not found: {path}")
    if path.stat().st_size == 0:
        raise FusionHWError(f"{path} is not an ONNX model (the file is empty)")
    try:
        model = onnx.load(str(path))
    except DecodeError:
        raise FusionHWError(f"{path} is not an ONNX model (truncated, or not an ONNX protobuf: "
                            f"it does not parse as onnx.ModelProto)") from None
    except OSError as err:
        raise FusionHWError(f"cannot read {path}: {err.strerror or err}") from None
    except onnx.checker.ValidationError as err:  # its external data (tensor files beside it) missing
        raise FusionHWError(f"{path}: {str(err).strip().splitlines()[0]}") from None
    except Exception as err:  # pylint: disable=broad-except
        raise FusionHWError(f"{path} is not an ONNX model ({type(err).__name__})") from None
    if not model.graph.node:
        raise FusionHWError(f"{path} is not an ONNX model (it has no graph nodes)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise FusionHWError(f"{path} is not a valid ONNX model: {str(err).splitlines()[0]}") from None
    return model


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs (If, Loop and Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from _nodes(sub)


def _default_opset(model: onnx.ModelProto) -> Union[int, None]:
    """The model's opset of ONNX's own domain, as TVM's importer reads it (None: none imported)."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return int(opset.version)
    return None


def _importer_versions(op_type: str) -> List[int]:
    """The opsets from which TVM's importer implements ``op_type`` (its ``_impl_v<N>``), or []."""
    try:  # pylint: disable-next=import-outside-toplevel
        from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map
    except ImportError:  # another TVM: leave the check to its importer
        return []
    converter = _get_convert_map().get(op_type)
    if converter is None:
        return []
    return sorted(int(n[len("_impl_v"):]) for n in dir(converter) if n.startswith("_impl_v"))


def _misread(node: onnx.NodeProto, new) -> str:
    """What of ``node`` (written against an older schema) schema ``new`` reads otherwise ('' if
    nothing): an attribute it lacks or types otherwise, an input count or position it does not
    have (a position renamed with a prefix, ``mean`` -> ``input_mean``, keeps its meaning)."""
    for attr in node.attribute:
        there = new.attributes.get(attr.name)
        if there is None:
            return f"it has no attribute '{attr.name}'"
        if int(there.type.value) != int(attr.type):
            return (f"attribute '{attr.name}' is {there.type.name}, not "
                    f"{onnx.AttributeProto.AttributeType.Name(attr.type)}")
    if not new.min_input <= len(node.input) <= new.max_input:
        wanted = f"{new.min_input}" + (f" to {new.max_input}" if new.max_input != new.min_input else "")
        return f"it takes {wanted} inputs, not {len(node.input)}"
    if len(node.output) > new.max_output:
        return f"it has at most {new.max_output} outputs, not {len(node.output)}"
    return ""


def _renamed_input(node: onnx.NodeProto, old, new) -> str:
    """An input position of ``node`` that means something else in ``new`` than in ``old``."""
    for index, name in enumerate(node.input):
        was = old.inputs[min(index, len(old.inputs) - 1)].name if old.inputs else ""
        now = new.inputs[min(index, len(new.inputs) - 1)].name if new.inputs else ""
        if name and was != now and not now.endswith("_" + was):
            return f"input {index + 1} is '{now}', not '{was}'"
    return ""


def check_importable(model: onnx.ModelProto, name: str = "<model>") -> None:
    """Refuse what TVM's importer would read wrongly: see the module docstring.

    Raises :class:`FusionHWError` naming the first such node.
    """
    opset = _default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and opset > newest:
        raise FusionHWError(f"{name}: opset {opset} of ONNX's domain is newer than onnx {onnx.__version__} "
                            f"knows (up to {newest}); convert the model to opset {newest} or older")
    local = {f.domain for f in model.functions}
    for index, node in enumerate(_nodes(model.graph)):
        label = f"'{node.name}'" if node.name else f"#{index}"
        if node.domain not in IMPORTED_DOMAINS:
            hint = ("; it calls a model-local function: inline it first "
                    "(onnx.inliner.inline_local_functions)" if node.domain in local else "")
            raise FusionHWError(f"{name}: node {label} is {node.domain}.{node.op_type}, of an operator "
                                f"domain TVM's importer does not read (it reads ONNX's and com.microsoft's)"
                                + hint)
        versions = _importer_versions(node.op_type) if node.domain != "com.microsoft" else []
        if opset is None or not versions or opset >= versions[0]:
            continue  # TVM picks the definition this opset has
        try:
            old = onnx.defs.get_schema(node.op_type, opset, "")
            new = onnx.defs.get_schema(node.op_type, versions[0], "")
        except onnx.defs.SchemaError:
            continue  # not an ONNX operator at these opsets: the checker or the importer says so
        if old.since_version == new.since_version:
            continue
        why = _misread(node, new) or _renamed_input(node, old, new)
        if why:
            op = node.op_type
            raise FusionHWError(
                f"{name}: node {label} is {op}-{old.since_version} (the model's opset {opset}), older than "
                f"any {op} TVM's importer implements (from opset {versions[0]}): it would read it as "
                f"{op}-{new.since_version}, where {why}; convert the model to opset {versions[0]} or newer "
                f"(onnx.version_converter.convert_version)")


def import_onnx(model: Union[str, Path, onnx.ModelProto], keep_params_in_input: bool = True,
                name: Optional[str] = None) -> tvm.IRModule:
    """Import an ONNX model (or file) into Relax.

    With ``keep_params_in_input`` (the default) the weights are parameters of ``main`` after the
    inputs, so ``relax.transform.LiftTransformParams`` can split weight transforms off. ``name``
    names a ModelProto in errors (a file is named by its path).
    """
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    name = name or "<model>"
    if not isinstance(model, onnx.ModelProto):
        name = str(model)
        model = load_onnx(model)
    check_importable(model, name)
    try:
        return from_onnx(model, keep_params_in_input=keep_params_in_input)
    except Exception as err:  # pylint: disable=broad-except
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        raise FusionHWError(f"TVM could not import {name}: {first}") from None
