"""Helpers the schedule-rule tests share: run a GPU-scheduled PrimFunc on the CPU, read CUDA.

What the project itself does (find nvcc, run and parse ptxas, find the device modules of a build)
is not copied here: the tests call :mod:`tvm_fusion_hw.hardware.toolchain` and
:mod:`tvm_fusion_hw.feedback`, so that they check the helpers the plugin uses."""

import math
import re

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback.kernel_launches import CUDA_KINDS, device_modules
from tvm_fusion_hw.feedback.kernel_resources import measure_cuda_source
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build, example_inputs
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules import FUSED_PAIR_TEMPLATES

LLVM = tvm.target.Target({"kind": "llvm"})


def prim_funcs(mod):
    """{name: PrimFunc} of a module."""
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}


def fused_funcs(model, batch, target, fuse=None, attention=True, **knobs):
    """{name: PrimFunc} of zoo ``model`` fused for ``target`` (by ``fuse``, else our pass with its
    defaults and ``knobs``), before scheduling: one PrimFunc per kernel. ``attention=False``: without
    the attention chain, for tests of the softmax and batched-matmul kernels it would fuse into one."""
    mod = import_onnx(build(model, batch=batch), keep_params_in_input=True)
    if fuse is None and not attention:
        knobs = {"pair_templates": WITHOUT_ATTENTION, **knobs}
    return prim_funcs(fused_module(mod, target, fuse or hw.fusion_pass(target, **knobs)))


#: the default pair templates but attention's chain
WITHOUT_ATTENTION = tuple(p for p in FUSED_PAIR_TEMPLATES if p != "matmul->reduce->matmul")


def fused_graph(shape, body, target_name="nvidia-h200", extra=()):
    """The one fused PrimFunc our fusion for ``target_name`` makes of ``body(bb, x, *extra)`` on
    an fp32 ``x`` of ``shape`` (``extra``: more fp32 inputs, by shape)."""
    target = hw.target(target_name)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    others = [relax.Var(f"p{i}", relax.TensorType(s, "float32")) for i, s in enumerate(extra)]
    with bb.function("main", [x, *others]):
        with bb.dataflow():
            out = bb.emit_output(body(bb, x, *others))
        bb.emit_func_output(out)
    funcs = prim_funcs(fused_module(bb.get(), target, hw.fusion_pass(target)))
    assert len(funcs) == 1, sorted(funcs)
    return next(iter(funcs.values()))


def blocks(func):
    """The blocks of a PrimFunc, innermost first."""
    found = []
    tvm_ffi.structural_walk(func, [(s_tir.SBlock, found.append)], order="post")
    return found


def compile_func(func, target):
    """``tvm.compile`` of one PrimFunc (as ``k``) for ``target``."""
    return tvm.compile(tvm.IRModule({"k": func.with_attr("global_symbol", "k")}), target=target)


def serial(func, blocks_reversed=False, blocks_stride=0):
    """The scheduled PrimFunc with its thread loops made serial, so that LLVM can run it (and its
    unrolled loops too, which only saves LLVM compile time). Schedule primitives preserve
    semantics; this checks that a rule used them on the right blocks.

    ``blocks_reversed``: the ``blockIdx`` loops run backwards. Blocks that write the same
    element (a padded tile spilling into the next group's outputs) then leave the other value:
    one serial order alone cannot tell. ``blocks_stride``: instead, block ``(i * k) mod n`` runs
    i-th, ``k`` the first integer from ``blocks_stride`` up that is coprime to ``n`` (every block
    once, no neighbour after its neighbour). For a shared tile staged per block (``compute_at``
    at ``blockIdx``), the reversed order gives wrong results on LLVM where forward and strided
    orders agree: ``extent - 1 - i`` does not survive the buffer compaction of a tile whose
    region depends on the block index (seen on TiledTranspose; not understood), so those tests
    use the stride."""

    def post(loop):
        if loop.kind not in (tirx.ForKind.THREAD_BINDING, tirx.ForKind.UNROLLED):
            return loop
        tag = loop.thread_binding.thread_tag if loop.thread_binding is not None else ""
        if (blocks_reversed or blocks_stride) and tag.startswith("blockIdx"):
            step = tirx.Var(loop.loop_var.name + "_rev", loop.loop_var.ty)
            if blocks_stride:
                n = int(loop.extent)
                k = next(c for c in range(blocks_stride, blocks_stride + n + 1) if math.gcd(c, n) == 1)
                order = loop.min + tirx.floormod(step * k, n)
            else:
                order = loop.min + loop.extent - 1 - step
            body = tirx.SeqStmt([tirx.Bind(loop.loop_var, order), loop.body])
            return tirx.For(step, 0, loop.extent, tirx.ForKind.SERIAL, body, None, loop.annotations)
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body,
                        None, loop.annotations)

    return tvm_ffi.structural_map(func, (tirx.For, post))


def run_llvm(func, args):
    """Run ``func`` (last argument is the output) on the CPU; return the output."""
    ex = compile_func(func, LLVM)
    tensors = [tvm.runtime.tensor(a) for a in args]
    ex["k"](*tensors)
    return tensors[-1].numpy()


def cuda_source(ex):
    """All CUDA source of a built executable."""
    return "\n".join(m.inspect_source("") for m in device_modules(ex, CUDA_KINDS))


_KERNEL_HEADER = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\([^)]*\) \{')


def kernels_of(source, group=None):
    """{kernel name: body} of the CUDA kernels defined in ``source``; with ``group``, only those
    made for the PrimFunc ``group`` (``<group>_kernel``, ``<group>_kernel_1``, ...)."""
    out = {}
    for match in _KERNEL_HEADER.finditer(source):
        name = match.group(1)
        if group is None or re.fullmatch(rf"{re.escape(group)}_kernel\w*", name):
            out[name] = source[match.end():].split('extern "C"')[0]
    return out


def kernel_body(source, name):
    """The body of the CUDA kernel ``name`` in ``source`` (it must be there)."""
    bodies = kernels_of(source)
    assert name in bodies, (name, sorted(bodies))
    return bodies[name]


_SHARED_DECL = re.compile(r"__shared__[^;]*?\b(\w+)\[")
_STORE = re.compile(r"^(?:\(\(volatile \w+\*\))?(\w+)\)?\[([^\]]*)\] = (.*);$")


def shared_rmw_by_every_thread(body):
    """Statements of a CUDA kernel ``body`` that read and write one shared element that every
    thread along x writes (its index and every enclosing ``if`` free of ``threadIdx.x``): a race
    between the warps of a block, which a serialised CPU run cannot show."""
    shared = set(_SHARED_DECL.findall(body))
    found, conditions = [], []
    for line in body.splitlines():
        text = line.strip()
        if text.endswith("{"):
            conditions.append(text)
        elif text.startswith("}"):
            conditions = conditions[:-1]
        elif (store := _STORE.match(text)) and store.group(1) in shared:
            name, index, value = store.groups()
            same_element = re.search(rf"\b{re.escape(name)}\)?\[{re.escape(index)}\]", value)
            if same_element and "threadIdx.x" not in index and not any("threadIdx.x" in c for c in conditions):
                found.append(text)
    return found


def assert_schedule_preserves_numerics(func, sch, seed=0, reassociates=False, blocks_reversed=False,
                                       blocks_stride=0):
    """``sch`` (a schedule of ``func``) computes what ``func`` does, on fresh random inputs, with
    every output element written (the output starts as NaN); with ``blocks_reversed`` also with
    its blocks run in reverse (see :func:`serial`; DepthwiseConv's tiles and ConvPool's edge
    tiles read shared or local elements another block left and differ in reverse, though their
    kernels match onnxruntime on the H200: not used for them until that is understood).

    ``reassociates``: the schedule sums in another order (split K), so a result that cancels
    differs by rounding: the error is then measured against the output's scale. ``blocks_stride``:
    also with the blocks in the strided order of :func:`serial`."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    assert sch is not None
    rng = np.random.default_rng(seed)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    # Per-channel vectors (BatchNorm's scale, shift, mean, variance) positive: sqrt(variance).
    args = [(rng.uniform(0.5, 1.5, s) if len(s) <= 1 else rng.standard_normal(s)).astype("float32")
            for s in shapes[:-1]]
    args.append(np.full(shapes[-1], np.nan, "float32"))
    ref = run_llvm(func, [a.copy() for a in args])
    atol = 1e-5 * max(1.0, float(np.abs(ref).max())) if reassociates else 1e-5
    orders = [{}] + ([{"blocks_reversed": True}] if blocks_reversed else []) + (
        [{"blocks_stride": blocks_stride}] if blocks_stride else [])
    for order in orders:
        ours = run_llvm(serial(sch.mod["main"], **order), [a.copy() for a in args])
        assert np.isfinite(ours).all()
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=atol, err_msg=f"blocks: {order or 'in order'}")


def ptxas_kernels(source, arch="sm_90"):
    """{kernel: KernelResources} of CUDA source, measured as the register feedback measures it
    (:func:`tvm_fusion_hw.feedback.kernel_resources.measure_cuda_source`: TVM's nvcc command
    through :mod:`tvm_fusion_hw.feedback.ptxas`, its ``-v`` report parsed). Needs nvcc
    (:func:`tvm_fusion_hw.hardware.toolchain.have_nvcc`)."""
    return {k.name: k for k in measure_cuda_source(source, arch)}


def zoo_module(name, batch=1):
    """(Relax module with weights as parameters, weights, input arrays in main's order) of zoo
    model ``name``, on its seeded example inputs and weights."""
    model = build(name, batch=batch)
    mod, params = relax.frontend.detach_params(import_onnx(model))
    feeds = example_inputs(model)
    num_input = int(mod["main"].attrs["num_input"])
    return mod, params.get("main", []), [feeds[p.name] for p in mod["main"].params[:num_input]]


def run_model(name, batch, target, pipeline, device):
    """(first output as numpy, vm, args) of zoo model ``name`` built with ``pipeline`` for
    ``target`` and run on ``device`` on its seeded example inputs and weights."""
    mod, weights, inputs = zoo_module(name, batch)
    args = [tvm.runtime.tensor(a, device) for a in inputs] + [tvm.runtime.tensor(w.numpy(), device) for w in weights]
    vm = relax.VirtualMachine(tvm.compile(mod, target=target, relax_pipeline=pipeline), device)
    out = vm["main"](*args)
    return (out[0] if isinstance(out, (list, tuple)) else out).numpy(), vm, args


# ---- synthetic PrimFuncs that more than one rule's tests use ---------------------------------
# pylint: disable=invalid-name,no-self-argument
@T.prim_func(private=True, s_tir=True)
def row_sum(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64,), "float32")):
    for i, k in T.grid(64, 128):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vk]
