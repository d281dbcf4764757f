"""Helpers the schedule-rule tests share: run a GPU-scheduled PrimFunc on the CPU, read CUDA."""

import tvm
import tvm_ffi
from tvm import tirx

from tvm_fusion_hw.kernel_resources import device_modules

LLVM = tvm.target.Target({"kind": "llvm"})


def prim_funcs(mod):
    """{name: PrimFunc} of a module."""
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}


def serial(func):
    """The scheduled PrimFunc with its thread loops made serial, so that LLVM can run it (and its
    unrolled loops too, which only saves LLVM compile time). Schedule primitives preserve
    semantics; this checks that a rule used them on the right blocks."""

    def post(loop):
        if loop.kind in (tirx.ForKind.THREAD_BINDING, tirx.ForKind.UNROLLED):
            return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body,
                            None, loop.annotations)
        return loop

    return tvm_ffi.structural_map(func, (tirx.For, post))


def run_llvm(func, args):
    """Run ``func`` (last argument is the output) on the CPU; return the output."""
    ex = tvm.compile(tvm.IRModule({"k": func.with_attr("global_symbol", "k")}), target=LLVM)
    tensors = [tvm.runtime.tensor(a) for a in args]
    ex["k"](*tensors)
    return tensors[-1].numpy()


def cuda_source(ex):
    """All CUDA source of a built executable."""
    return "\n".join(m.inspect_source("") for m in device_modules(ex, ["cuda"]))


def assert_schedule_preserves_numerics(func, sch, seed=0):
    """``sch`` (a schedule of ``func``) computes what ``func`` does, on fresh random inputs, with
    every output element written (the output starts as NaN)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    assert sch is not None
    rng = np.random.default_rng(seed)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    args = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    args.append(np.full(shapes[-1], np.nan, "float32"))
    ref = run_llvm(func, [a.copy() for a in args])
    ours = run_llvm(serial(sch.mod["main"]), [a.copy() for a in args])
    assert np.isfinite(ours).all()
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
