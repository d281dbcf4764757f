"""Grouped convolutions through ImplicitGemm as one GEMM per group (schedules/gemm/groups.py).

The problem the rule sees is checked against the convolution's own arithmetic (groups, channels
per group, window, output pixels), its schedules against the unscheduled PrimFunc (serial threads
on LLVM), a fused epilogue included, and the CUDA build: no fallback to dlight, no spills.
"""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules import ImplicitGemm
from tvm_fusion_hw.schedules.gemm import groups
from tir_checks import assert_schedule_preserves_numerics, cuda_source, prim_funcs, ptxas_kernels

H200 = hw.target("nvidia-h200")


def conv_module(n, c, size, f, group_count, kernel=3, stride=1, epilogue=False):
    """conv2d (padding kernel // 2), with ``epilogue`` a bias add and ReLU after it."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, size, size), "float32"))
    w = relax.Var("w", relax.TensorType((f, c // group_count, kernel, kernel), "float32"))
    b = relax.Var("b", relax.TensorType((1, f, 1, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, strides=stride, padding=kernel // 2, groups=group_count))
            if epilogue:
                y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, b))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def conv_kernel(*args, **kwargs):
    """The one PrimFunc (kernel) stock fusion makes of :func:`conv_module`."""
    funcs = prim_funcs(fused_module(conv_module(*args, **kwargs), H200))
    assert len(funcs) == 1, sorted(funcs)
    return next(iter(funcs.values()))


CASES = [  # (n, c, size, f, groups, kernel, stride): ResNeXt's 32 x 4..8, RegNet-like 8-wide groups, odd sizes
    (1, 128, 14, 128, 32, 3, 1),
    (2, 64, 9, 64, 8, 3, 2),
    (1, 48, 7, 96, 6, 3, 1),
    (2, 24, 5, 36, 3, 1, 1),
    (1, 32, 56, 32, 2, 3, 1),  # RegNetX-400MF's first stage: 16 a group, once tiled 32 wide
]


@pytest.mark.parametrize("n, c, size, f, group_count, kernel, stride", CASES)
def test_grouped_conv_is_a_gemm_per_group(n, c, size, f, group_count, kernel, stride):
    func = conv_kernel(n, c, size, f, group_count, kernel, stride)
    with H200:
        problem, tile, sch = ImplicitGemm().schedule_best(func, H200)
    out_size = (size + 2 * (kernel // 2) - kernel) // stride + 1
    assert (problem.batch, problem.cols) == (group_count, f // group_count)
    assert (problem.rows, problem.depth) == (n * out_size * out_size, c // group_count * kernel * kernel)
    assert problem.exact_cols and (f // group_count) % tile.block_cols == 0  # no padded column
    # spills into the next group's channels (the reversed block order shows the overlap)
    assert_schedule_preserves_numerics(func, sch, blocks_reversed=True)


def test_grouped_conv_with_its_epilogue():
    func = conv_kernel(2, 32, 6, 32, 4, epilogue=True)
    with H200:
        problem, _, sch = ImplicitGemm().schedule_best(func, H200)
    assert problem.batch == 4
    assert_schedule_preserves_numerics(func, sch, blocks_reversed=True)


def test_what_is_not_grouped_stays_as_it_was():
    plain = conv_kernel(1, 16, 8, 32, 1)
    assert groups.split_groups(plain).same_as(plain)  # dlight normalises it already
    depthwise = conv_kernel(1, 16, 8, 16, 16)  # one channel a group: no J to split off
    assert groups.split_groups(depthwise).same_as(depthwise)


def test_grouped_convs_build_for_sm90_without_fallback_or_spills():
    mod = conv_module(1, 128, 14, 128, 32, epilogue=True)
    pipeline = hw.get_pipeline(H200)
    with hw.pass_context(H200):
        source = cuda_source(tvm.compile(mod, target=H200, relax_pipeline=pipeline))
    log = pipeline.schedule_pass.log
    assert set(log.rules.values()) == {"ImplicitGemm"} and not log.fallbacks
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    for name, kernel in ptxas_kernels(source).items():
        assert kernel.spill_store_bytes == 0 and kernel.spill_load_bytes == 0, name


def test_grouped_conv_matches_numpy_on_llvm():
    """Through the whole pipeline on llvm, against a numpy grouped convolution."""
    n, c, size, f, g = 2, 16, 6, 24, 4
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, size, size), dtype=np.float32)
    w = rng.standard_normal((f, c // g, 3, 3), dtype=np.float32)
    b = rng.standard_normal((1, f, 1, 1), dtype=np.float32)
    llvm = tvm.target.Target({"kind": "llvm"})
    ex = tvm.compile(conv_module(n, c, size, f, g, epilogue=True), target=llvm,
                     relax_pipeline=hw.get_pipeline(llvm, profile="nvidia-h200"))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in (x, w, b)]).numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((n, f, size, size), np.float64)
    for o in range(f):
        grp = o // (f // g)
        for i in range(c // g):
            for dy in range(3):
                for dx in range(3):
                    want[:, o] += w[o, i, dy, dx] * padded[:, grp * (c // g) + i, dy:dy + size, dx:dx + size]
    np.testing.assert_allclose(got, np.maximum(want + b, 0), rtol=1e-4, atol=1e-4)
