"""Helpers the schedule-rule tests share: run a GPU-scheduled PrimFunc on the CPU, read CUDA."""

import os
import re
import shutil
import subprocess
import tempfile

import tvm
import tvm_ffi
from tvm import tirx

from tvm_fusion_hw.feedback.kernel_launches import device_modules

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


def assert_schedule_preserves_numerics(func, sch, seed=0, reassociates=False):
    """``sch`` (a schedule of ``func``) computes what ``func`` does, on fresh random inputs, with
    every output element written (the output starts as NaN).

    ``reassociates``: the schedule sums in another order (split K), so a result that cancels
    differs by rounding: the error is then measured against the output's scale."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    assert sch is not None
    rng = np.random.default_rng(seed)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    # Per-channel vectors (BatchNorm's scale, shift, mean, variance) positive: sqrt(variance).
    args = [(rng.uniform(0.5, 1.5, s) if len(s) <= 1 else rng.standard_normal(s)).astype("float32")
            for s in shapes[:-1]]
    args.append(np.full(shapes[-1], np.nan, "float32"))
    ref = run_llvm(func, [a.copy() for a in args])
    ours = run_llvm(serial(sch.mod["main"]), [a.copy() for a in args])
    assert np.isfinite(ours).all()
    atol = 1e-5 * max(1.0, float(np.abs(ref).max())) if reassociates else 1e-5
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=atol)


def nvcc_path():
    """nvcc, or None when CUDA is not installed."""
    found = shutil.which("nvcc")
    if found is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        found = "/usr/local/cuda/bin/nvcc"
    return found


def ptxas_report(source):
    """{kernel: (registers, spill stores, spill loads, smem bytes)} from ``nvcc -Xptxas -v``."""
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "k.cu")
        with open(cu, "w", encoding="utf-8") as f:
            f.write(source)
        proc = subprocess.run(
            [nvcc_path(), "--cubin", "-arch=sm_90", "-w", "-Xptxas", "-v", "-O3", "--use_fast_math",
             "-o", os.path.join(tmp, "k.cubin"), cu],
            capture_output=True, text=True, check=True, timeout=300)
    report, name, spills = {}, None, (0, 0)
    for line in proc.stderr.splitlines():
        m = re.search(r"Function properties for (\w+)", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spills = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?$", line)
        if m and name:
            report[name] = (int(m.group(1)), *spills, int(m.group(2) or 0))
    return report


def run_model(name, batch, target, pipeline, device):
    """(first output as numpy, vm, args) of zoo model ``name`` built with ``pipeline`` for
    ``target`` and run on ``device`` on its seeded example inputs and weights."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tvm_fusion_hw.frontend import import_onnx  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.models import build, example_inputs  # pylint: disable=import-outside-toplevel

    model = build(name, batch=batch)
    mod, params = relax.frontend.detach_params(import_onnx(model))
    feeds = example_inputs(model)
    num_input = int(mod["main"].attrs["num_input"])
    args = [tvm.runtime.tensor(feeds[p.name], device) for p in mod["main"].params[:num_input]]
    args += [tvm.runtime.tensor(w.numpy(), device) for w in params.get("main", [])]
    vm = relax.VirtualMachine(tvm.compile(mod, target=target, relax_pipeline=pipeline), device)
    out = vm["main"](*args)
    return (out[0] if isinstance(out, (list, tuple)) else out).numpy(), vm, args
