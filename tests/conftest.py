"""Shared fixtures: each model is imported and built once per test session (per xdist worker);
the H200 target."""

from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tir_checks import zoo_module

LLVM = tvm.target.Target({"kind": "llvm"})


def _flatten(value) -> List[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in _flatten(item)]


class ModelRunner:
    """Builds a zoo model with a pipeline for llvm, runs it on seeded inputs, caches everything."""

    def __init__(self):
        self._modules: Dict[Tuple[str, int], tuple] = {}
        self._outputs: Dict[tuple, List[np.ndarray]] = {}
        self.reports: Dict[tuple, hw.FusionReport] = {}

    def module(self, name: str, batch: int = 1):
        """(Relax module with weights as parameters, weights, input arrays in main's order)."""
        key = (name, batch)
        if key not in self._modules:
            self._modules[key] = zoo_module(name, batch)
        return self._modules[key]

    def outputs(self, name: str, profile: Optional[str], batch: int = 1) -> List[np.ndarray]:
        """Outputs on llvm: stock fusion when ``profile`` is None, else that profile's decisions."""
        key = (name, batch, profile)
        if key not in self._outputs:
            mod, weights, inputs = self.module(name, batch)
            if profile is None:
                pipeline = hw.stock_pipeline(LLVM)
            else:
                fuse = hw.fusion_pass(profile)
                pipeline = hw.get_pipeline(LLVM, fuse_pass=fuse)
            ex = tvm.compile(mod, target=LLVM, relax_pipeline=pipeline)
            if profile is not None:
                self.reports[key] = fuse.report
            vm = relax.VirtualMachine(ex, tvm.cpu())
            args = [tvm.runtime.tensor(a) for a in inputs] + list(weights)
            self._outputs[key] = _flatten(vm["main"](*args))
        return self._outputs[key]


@pytest.fixture(scope="session")
def runner() -> ModelRunner:
    return ModelRunner()


@pytest.fixture(scope="session")
def h200() -> tvm.target.Target:
    """The H200 profile's target, which most schedule-rule tests build for."""
    return hw.target("nvidia-h200")
