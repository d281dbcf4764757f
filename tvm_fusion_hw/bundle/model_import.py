"""Models into the lifted Relax module a bundle compiles: built, imported from ONNX with the weights
as inputs, detached and lifted (``main_transform_params``), and the facts the manifest records of
their tensors."""

from __future__ import annotations

from typing import Dict

from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.models import build

#: ONNX op -> {input index: role of that initializer} (the runner's fallback weights use roles).
ROLES = {"BatchNormalization": {1: "bn_scale", 2: "bn_bias", 3: "bn_mean", 4: "bn_var"},
         "LayerNormalization": {1: "ln_scale", 2: "ln_bias"}}


def tensor_spec(var) -> Dict[str, object]:
    """Name, static shape and dtype of a Relax parameter."""
    ty = var.ty
    return {"name": var.name, "shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype)}


def param_roles(model) -> Dict[str, str]:
    """Initializer name -> role (``bn_var``, ``ln_scale``, ...) for normalization inputs."""
    roles = {}
    for node in model.graph.node:
        for idx, name in enumerate(node.input):
            role = ROLES.get(node.op_type, {}).get(idx)
            if role:
                roles[name] = role
    return roles


def import_model(name: str, batch: int, seed: int = 0):
    """Build, import (weights as inputs), detach and lift one model.

    Returns ``(onnx_model, lifted_module, main_params_before_lifting, weight_values)``: the
    first ``num_input`` parameters are the inputs, the rest the weights, in the order of
    ``weight_values`` and of ``main_transform_params``' tuple.
    """
    model = build(name, batch=batch, seed=seed)
    mod = from_onnx(model, keep_params_in_input=True)
    num_input = int(mod["main"].attrs["num_input"])
    fparams = list(mod["main"].params)
    mod, values = relax.frontend.detach_params(mod)
    values = list(values.get("main", []))
    if len(fparams) - len(values) != num_input:
        raise FusionHWError(f"{name}: {len(fparams)} parameters, {len(values)} weights, "
                            f"num_input {num_input}")
    return model, relax.transform.LiftTransformParams()(mod), fparams, values
