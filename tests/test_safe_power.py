"""SafePower: ``power`` that CUDA's fast math cannot turn into NaN (tvm_fusion_hw/safe_power.py).

Numerics against numpy's ``power`` (not the code under test) on llvm, and the CUDA source: stock
TVM's build calls ``powf`` (``exp2(y * log2 x)`` under ``--use_fast_math``, NaN for x < 0), the
plugin's does not where the exponent is a constant integer.
"""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tir_checks import LLVM, cuda_source

SHAPE = (3, 7)


def _power_module(exponent):
    """main(x, y) = power(x, exponent), the exponent a constant or (None) the input y."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    y = relax.Var("y", relax.TensorType((SHAPE[1],), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            e = y if exponent is None else relax.const(np.float32(exponent))
            out = bb.emit_output(bb.emit(relax.op.power(x, e)))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod, x, y, pipeline):
    ex = tvm.compile(mod, target=LLVM, relax_pipeline=pipeline)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y)).numpy()


@pytest.mark.parametrize("exponent", [-3, -2, -1, 0, 1, 2, 3, 5, 7, 64, 0.5, 2.5, None])
def test_power_matches_numpy(exponent):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE, dtype=np.float32) * 1.5
    x[0, 0], x[0, 1] = 0.0, -0.0
    y = np.array([0, 1, 2, 3, -1, 0.5, -2.5], np.float32)
    with np.errstate(all="ignore"):  # float64 powers rounded to float32 (overflow to inf, as fp32)
        expected = np.power(x.astype(np.float64), y if exponent is None else exponent).astype(np.float32)
    with np.errstate(all="ignore"):
        ours = _run(_power_module(exponent), x, y, hw.get_pipeline(LLVM, profile="nvidia-h200"))
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=0, equal_nan=True)
    # where IEEE pow is finite the rewrite is too: negative bases with integer exponents included
    assert np.isfinite(ours).sum() == np.isfinite(expected).sum()


def _ops(mod):
    return [b.value.op.name for b in mod["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]


def test_integer_powers_become_multiplications():
    assert _ops(hw.SafePower()(_power_module(3))) == ["relax.multiply", "relax.multiply"]
    assert _ops(hw.SafePower()(_power_module(2.5))) == ["relax.power"]  # NaN below 0 in IEEE too


def test_cuda_build_has_no_powf_for_integer_exponents():
    target = hw.target("nvidia-h200")
    stock = cuda_source(tvm.compile(_power_module(3), target=target, relax_pipeline=hw.stock_pipeline(target)))
    ours = cuda_source(tvm.compile(_power_module(3), target=target, relax_pipeline=hw.get_pipeline(target)))
    assert "powf(" in stock
    assert "powf(" not in ours
