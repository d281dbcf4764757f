"""Deterministic ONNX model builders (installed as ``tvm_fusion_hw.models``).

Full models follow their papers layer by layer, with seeded random weights; micro-graphs are the
fusion cases of ``fusion-rules.md``. Every model is opset 17, float32, static shapes, with its
main input named ``input`` and its one output named ``output``.

>>> from tvm_fusion_hw.models import build, example_inputs
>>> model = build("resnet50", batch=2, seed=0)          # onnx.ModelProto
>>> feeds = example_inputs(model)                          # {"input": float32 [2, 3, 224, 224]}
"""

from __future__ import annotations

from typing import Callable

import onnx

# Absolute import: this folder is mapped into the tvm_fusion_hw package by setup.py, and it
# resolves the same way when the repository root is on sys.path during development.
from tvm_fusion_hw.errors import FusionHWError

from .bert import HIDDEN, build_bert_encoder_layer
from .common import example_inputs, num_params
from .micro import (CONV_POOL_SIZE, DW_PW_SIZE, ELTWISE_SIZE, LN_SIZE, build_conv_relu_pool, build_dw_pw, build_eltwise5, build_layernorm_residual, build_relu_add_mul)
from .mobilenet_v2 import build_mobilenet_v2
from .resnet50 import build_resnet50
from .squeezenet import build_squeezenet1_1

#: name -> builder(batch=..., seed=..., **kwargs) -> onnx.ModelProto
MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "mobilenet_v2": build_mobilenet_v2,
    "resnet50": build_resnet50,
    "squeezenet1_1": build_squeezenet1_1,
    "bert_encoder_layer": build_bert_encoder_layer,
    "relu_add_mul": build_relu_add_mul,
    "eltwise5": build_eltwise5,
    "conv_relu_pool": build_conv_relu_pool,
    "dw_pw": build_dw_pw,
    "layernorm_residual": build_layernorm_residual,
}

#: Per-sample shape of the ``input`` tensor at each builder's defaults (batch axis excluded).
_INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "mobilenet_v2": (3, 224, 224),
    "resnet50": (3, 224, 224),
    "squeezenet1_1": (3, 224, 224),
    "bert_encoder_layer": (128, HIDDEN),
    "relu_add_mul": ELTWISE_SIZE,
    "eltwise5": ELTWISE_SIZE,
    "conv_relu_pool": CONV_POOL_SIZE,
    "dw_pw": DW_PW_SIZE,
    "layernorm_residual": LN_SIZE,
}

__all__ = ["MODELS", "build", "list_models", "input_shape", "input_shapes", "example_inputs",
           "num_params"]


def list_models() -> list[str]:
    """Names of all models, full models first, then micro-graphs."""
    return list(MODELS)


#: A corpus model is named ``corpus:NAME`` wherever a zoo name is taken (``build``, the bundle).
CORPUS_PREFIX = "corpus:"
#: A fuzz graph of the GPU seed set (``models/fuzz.py``: ``seed_programs``) is ``fuzz:NAME``.
FUZZ_PREFIX = "fuzz:"


def check_name(name: str) -> None:
    """Raise :class:`FusionHWError` (one line, the known names) unless ``name`` is a model."""
    if name.startswith(FUZZ_PREFIX):
        from .fuzz import program_named  # pylint: disable=import-outside-toplevel

        program_named(name[len(FUZZ_PREFIX):])
        return
    if name.startswith(CORPUS_PREFIX):
        from . import corpus  # pylint: disable=import-outside-toplevel

        if name[len(CORPUS_PREFIX):] not in corpus.names():
            raise FusionHWError(f"unknown corpus model {name!r}; known: {', '.join(corpus.names())}")
        return
    if name not in MODELS:
        raise FusionHWError(f"unknown model {name!r}; known models: {', '.join(MODELS)} "
                            f"and {CORPUS_PREFIX}NAME for the corpus (tvm-fusion-hw models)")


def build(name: str, batch: int = 1, seed: int = 0, **kwargs) -> onnx.ModelProto:
    """Build model ``name`` with batch size ``batch`` and weight seed ``seed``.

    Extra keyword arguments go to the builder (e.g. ``size=`` for micro-graphs). ``corpus:NAME``
    loads a corpus graph with seeded weights, its shape arithmetic folded (what TVM's importer
    needs; outputs unchanged, see ``models/corpus/README.md``); ``fuzz:NAME`` a graph of the fuzz
    seed set (``fuzz:fuzz_seed0007``, batch 1 only: its shapes are its own).

    Raises
    ------
    FusionHWError
        For an unknown name (the message lists the known ones) or a batch below 1.
    """
    check_name(name)
    if not isinstance(batch, int) or batch < 1:
        raise FusionHWError(f"batch must be a positive integer, got {batch!r}")
    if name.startswith(FUZZ_PREFIX):
        from .fuzz import build_model, program_named  # pylint: disable=import-outside-toplevel

        if batch != 1:
            raise FusionHWError(f"{name}: a fuzz graph has its own shapes; build it at batch 1")
        return build_model(program_named(name[len(FUZZ_PREFIX):]), name[len(FUZZ_PREFIX):])
    if name.startswith(CORPUS_PREFIX):
        from . import corpus  # pylint: disable=import-outside-toplevel

        return corpus.load(name[len(CORPUS_PREFIX):], batch=batch, seed=seed, fold=True, **kwargs)
    return MODELS[name](batch=batch, seed=seed, **kwargs)


def input_shape(name: str, batch: int = 1) -> tuple[int, ...]:
    """Shape of the ``input`` tensor of model ``name`` at the builder's default sizes."""
    check_name(name)
    return (batch, *_INPUT_SHAPES[name])


def input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """All graph inputs of a built model (micro-graphs have several), name -> shape."""
    inits = {t.name for t in model.graph.initializer}
    return {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            for vi in model.graph.input if vi.name not in inits}
