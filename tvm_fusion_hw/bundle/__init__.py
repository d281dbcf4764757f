"""The runtime-only bundle: models compiled here (no GPU needed), with a slim TVM runtime, the
ONNX builders and the benchmark runner (``runner.py`` with its ``runner_timing.py`` and
``runner_report.py``, package data), for a GPU box without TVM's compiler. ``tvm-fusion-hw
bundle`` writes it (:func:`bundle_main`)."""

from .writer import bundle_main

__all__ = ["bundle_main"]
