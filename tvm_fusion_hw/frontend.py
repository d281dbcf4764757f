"""ONNX in, Relax out, with one-line errors for the usual mistakes.

``relax.frontend.onnx.from_onnx`` raises deep inside TVM for a file that is missing, is not ONNX,
or uses an operator it does not know; :func:`import_onnx` turns each into a
:class:`FusionHWError` that names the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import onnx
import tvm

from .errors import FusionHWError


def load_onnx(path: Union[str, Path]) -> onnx.ModelProto:
    """Read and check an ONNX file."""
    path = Path(path)
    if not path.is_file():
        raise FusionHWError(f"ONNX file not found: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as err:  # pylint: disable=broad-except
        raise FusionHWError(f"{path} is not an ONNX model ({type(err).__name__})") from None
    if not model.graph.node:
        raise FusionHWError(f"{path} is not an ONNX model (it has no graph nodes)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise FusionHWError(f"{path} is not a valid ONNX model: {str(err).splitlines()[0]}") from None
    return model


def import_onnx(model: Union[str, Path, onnx.ModelProto], keep_params_in_input: bool = True) -> tvm.IRModule:
    """Import an ONNX model (or file) into Relax.

    With ``keep_params_in_input`` (the default) the weights are parameters of ``main`` after the
    inputs, so ``relax.transform.LiftTransformParams`` can split weight transforms off.
    """
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    name = "<model>"
    if not isinstance(model, onnx.ModelProto):
        name = str(model)
        model = load_onnx(model)
    try:
        return from_onnx(model, keep_params_in_input=keep_params_in_input)
    except Exception as err:  # pylint: disable=broad-except
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        raise FusionHWError(f"TVM could not import {name}: {first}") from None
