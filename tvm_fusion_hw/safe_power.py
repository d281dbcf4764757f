"""SafePower: ``power`` that stays right under CUDA's fast math.

TVM builds every CUDA kernel with ``--use_fast_math`` (NVRTC and nvcc alike), which turns
``powf(x, y)`` into ``exp2(y * log2(x))``: NaN for every negative ``x``, even where ``y`` is an
integer. Transformers square (RMSNorm, T5's LayerNorm) and cube (GPT-2's tanh GELU) signed
activations this way, so stock TVM's CUDA builds of them are all NaN while their CPU builds are
finite. Before legalization this pass rewrites, on floating-point tensors:

- ``power(x, n)`` with a constant integer ``n`` (small enough, see :data:`MAX_MULTIPLIES`) into
  multiplications by squaring (``1 / ...`` for a negative ``n``, ones for ``n = 0``): exact and
  faster than any ``pow``;
- ``power(x, y)`` with a non-constant ``y`` into IEEE ``pow``'s sign rule around ``power(|x|, y)``:
  ``-|x|^y`` for a negative ``x`` and an odd integer ``y``, ``|x|^y`` for an even one, NaN for a
  non-integer one.

A constant non-integer exponent keeps ``power``: its negative bases are NaN in IEEE arithmetic too.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

from .relax_walk import subexpressions

#: Multiplications an integer exponent may cost (|n| up to 2**MAX_MULTIPLIES) before ``power`` stays.
MAX_MULTIPLIES = 6


def _constant_integer(exponent: Expr, base_ndim: int) -> Optional[int]:
    """The exponent as an integer, if it is one constant that broadcasts to the base's shape."""
    if not isinstance(exponent, tvm.ir.expr.Constant):
        return None
    value = exponent.value.numpy()
    if value.ndim > base_ndim or value.size == 0 or not np.all(value == value.flat[0]):
        return None
    first = float(value.flat[0])
    if not np.isfinite(first) or first != int(first) or abs(int(first)) > 2 ** MAX_MULTIPLIES:
        return None
    return int(first)


@expr_functor.mutator
class _PowerRewriter(PyExprMutator):
    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if not isinstance(call, Call) or not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.power":
            return call
        base, exponent = call.args
        info = base.ty
        if not isinstance(info, relax.TensorType) or info.ndim < 0 or "float" not in str(info.dtype):
            return call
        n = _constant_integer(exponent, info.ndim)
        if n is not None:
            return self._integer_power(base, n, str(info.dtype))
        if isinstance(exponent, tvm.ir.expr.Constant):
            return call  # a non-integer constant: a negative base is NaN in IEEE arithmetic too
        return self._signed_power(base, exponent, str(info.dtype))

    def _integer_power(self, base: Expr, n: int, dtype: str) -> Expr:
        one = relax.const(1.0, dtype)
        if n == 0:
            return relax.op.full_like(base, one)
        result, square, k = None, base, abs(n)
        while k:
            if k & 1:
                result = square if result is None else self.builder_.emit(relax.op.multiply(result, square))
            k >>= 1
            if k:
                square = self.builder_.emit(relax.op.multiply(square, square))
        return relax.op.divide(one, result) if n < 0 else result

    def _signed_power(self, base: Expr, exponent: Expr, dtype: str) -> Expr:
        emit = self.builder_.emit
        zero, two = relax.const(0.0, dtype), relax.const(2.0, dtype)
        magnitude = emit(relax.op.power(emit(relax.op.abs(base)), exponent))
        integral = emit(relax.op.equal(emit(relax.op.floor(exponent)), exponent))
        odd = emit(relax.op.not_equal(emit(relax.op.floor_mod(exponent, two)), zero))
        signed = emit(relax.op.where(odd, emit(relax.op.negative(magnitude)), magnitude))
        negative = emit(relax.op.where(integral, signed, relax.const(float("nan"), dtype)))
        return relax.op.where(emit(relax.op.less(base, zero)), negative, magnitude)


@tvm.transform.module_pass(opt_level=0, name="SafePower")
class SafePower:
    """Rewrite every ``relax.power`` of the module's Relax functions (see the module docstring)."""

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if not any(_calls_power(func) for _, func in mod.functions_items() if isinstance(func, relax.Function)):
            return mod
        rewriter = _PowerRewriter(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        return rewriter.builder_.get()


def _calls_power(func: relax.Function) -> bool:
    power = tvm.ir.Op.get("relax.power")
    return any(isinstance(e, Call) and e.op.same_as(power) for e in subexpressions(func))
