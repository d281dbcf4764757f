"""Tests for schedules/transpose/: the TiledTranspose schedule rule (a default rule since it ran on the H200).

CPU only. Checked:
- the rule takes ConvNeXt's permutes as our fusion makes them (NCHW to NHWC, and NHWC to NCHW
  with the layer scale and the residual add inlined) and attention's key transpose over odd
  sizes (197 tokens), tiling the output's innermost axis and the axis the input is contiguous
  along;
- it declines what is not an innermost-axis transpose (a copy, a reshape that keeps rows, a
  reduction), two transposed loads, a tiny output, a CPU target; and it is not a default rule;
- its schedules compute what the unscheduled PrimFunc computes (thread loops made serial, LLVM;
  the blocks also in a strided order, see ``tir_checks.serial``);
- the CUDA kernel (sm_90) stages a ``T x (T + 1)`` tile in shared memory with one barrier, and
  ptxas (when nvcc is present) reports no spills; the MI300X build (gfx942) links.
"""

import re

import pytest
from tvm import relax
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import kernel_resources
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.schedules.rules import default_rules, opt_in_rules, rules_named
from tvm_fusion_hw.schedules.transpose.rule import TiledTranspose
from tir_checks import LLVM, assert_schedule_preserves_numerics, compile_func, cuda_source, fused_funcs, kernel_body
from tir_checks import fused_graph as fused

def permute(axes):
    return lambda bb, x, *_: bb.emit(relax.op.permute_dims(x, axes))


def scale_residual(bb, x, scale, residual):
    """ConvNeXt's block end: NHWC back to NCHW, times the layer scale, plus the residual."""
    back = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
    return bb.emit(relax.op.add(bb.emit(relax.op.multiply(back, scale)), residual))


#: name -> (shape, graph, extra inputs, (fast, slow) output axes)
TAKEN = {
    "nchw_to_nhwc": ((2, 96, 56, 56), permute([0, 2, 3, 1]), (), (3, 2)),
    "nhwc_to_nchw_scale_residual": ((2, 56, 56, 96), scale_residual, ((96, 1, 1), (2, 96, 56, 56)), (3, 1)),
    "key_transpose_197": ((4, 3, 197, 64), permute([0, 1, 3, 2]), (), (3, 2)),
}
DECLINED = {
    "copy": ((64, 256), lambda bb, x: bb.emit(relax.op.add(x, x))),
    "rows_kept": ((4, 197, 12, 64), permute([0, 2, 1, 3])),  # the innermost axis stays: VectorizedElementwise's
    "reduction": ((64, 256), lambda bb, x: bb.emit(relax.op.sum(x, axis=1))),
    "tiny": ((8, 8), permute([1, 0])),
}


@pytest.fixture(scope="module")
def taken():
    return {name: fused(shape, body, extra=extra) for name, (shape, body, extra, _) in TAKEN.items()}


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_takes_innermost_axis_transposes(taken, h200, name):
    problem, tile = TiledTranspose().plan(taken[name], h200)
    (part,) = problem.parts
    assert (part.fast, part.slow) == TAKEN[name][3]
    assert tile.size == 32 and tile.threads <= 1024
    assert tile.shared_bytes == 32 * 33 * 4


def test_convnext_block_end_with_the_next_start(h200):
    """ConvNeXt's block end fused with the next block's start (our fusion of the corpus graph):
    the NHWC input transposed back, scaled, plus the NCHW residual, transposed again for the next
    LayerNorm. The two transposes of the input cancel: the residual is the transposed load."""
    funcs = fused_funcs("corpus:convnext_tiny", 1, h200)
    (name,) = [n for n in funcs if n.startswith("fused_transpose1_") and n.endswith("_transpose")]
    problem, _ = TiledTranspose().plan(funcs[name], h200)
    (part,) = problem.parts
    assert (part.fast, part.slow) == (3, 2)
    assert_schedule_preserves_numerics(funcs[name], TiledTranspose().apply(funcs[name], h200, False), blocks_stride=5)


# pylint: disable=invalid-name,no-self-argument
@T.prim_func(private=True, s_tir=True)
def two_transposes(A: T.Buffer((1024, 768), "float32"), B: T.Buffer((768, 1024), "float32"),
                   C: T.Buffer((768, 1024), "float32")):
    for i, j in T.grid(768, 1024):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi]
    for i, j in T.grid(768, 1024):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vj, vi] * T.float32(2)
# pylint: enable=invalid-name,no-self-argument


def test_two_outputs_are_a_kernel_and_a_tile_each(h200):
    problem, tile = TiledTranspose().plan(two_transposes, h200)
    assert [(p.fast, p.slow) for p in problem.parts] == [(1, 0), (1, 0)]
    assert tile.blocks == 2 * 32 * 24
    sch = TiledTranspose().apply(two_transposes, h200, False)
    assert_schedule_preserves_numerics(two_transposes, sch, blocks_stride=5)
    source = cuda_source(compile_func(sch.mod["main"], h200))
    kernels = set(re.findall(r"__global__ void __launch_bounds__\(256\) (k_kernel\w*)\(", source))
    assert kernels == {"k_kernel", "k_kernel_1"}, kernels  # a kernel each, each a shared tile
    assert source.count("__shared__") == 2


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declines(h200, name):
    shape, body = DECLINED[name]
    assert TiledTranspose().apply(fused(shape, body), h200, False) is None


def test_declines_two_transposed_loads(h200):
    """Two inputs each transposed: one tile cannot serve both."""
    func = fused((64, 96), lambda bb, x, y: bb.emit(relax.op.add(bb.emit(relax.op.permute_dims(x, [1, 0])),
                                                                bb.emit(relax.op.permute_dims(y, [1, 0])))),
                 extra=((64, 96),))
    assert TiledTranspose().apply(func, h200, False) is None


def test_declines_cpu_targets(taken):
    assert TiledTranspose().apply(taken["nchw_to_nhwc"], LLVM, False) is None


def test_a_default_rule_after_the_elementwise_one():
    """It ran on the H200 (sanitizer, corpus variants): a default rule, tried after
    VectorizedElementwise, which takes every transpose that keeps the innermost axis."""
    names = [type(r).__name__ for r in default_rules()]
    assert names[-2:] == ["VectorizedElementwise", "TiledTranspose"]
    assert not opt_in_rules()
    assert [type(r).__name__ for r in rules_named(["TiledTranspose", "RowReduction"])] == [
        "RowReduction", "TiledTranspose"]


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_schedules_compute_the_same(taken, h200, name):
    assert_schedule_preserves_numerics(taken[name], TiledTranspose().apply(taken[name], h200, False),
                                       blocks_stride=5)


@pytest.mark.parametrize("name", ["nchw_to_nhwc", "nhwc_to_nchw_scale_residual"])
def test_sm90_kernel_stages_a_padded_tile(taken, h200, name):
    source = cuda_source(compile_func(TiledTranspose().apply(taken[name], h200, False).mod["main"], h200))
    body = kernel_body(source, "k_kernel")
    assert re.search(r"__shared__ (alignas\(\d+\) )?float \w+\[1056\]", body), body  # 32 rows of 33
    assert body.count("__syncthreads()") == 1
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: checked in the source only")
    (kernel,) = kernel_resources.measure_cuda_source(source, "sm_90")
    assert not kernel.spills, kernel


def test_mi300x_build():
    target = hw.target("amd-mi300x")
    if not toolchain.have_rocm_toolchain():
        pytest.skip("no ROCm toolchain (ld.lld 22, device libraries): run scripts/install-system-deps.sh")
    toolchain.configure_rocm()
    func = fused((8, 96, 56, 56), permute([0, 2, 3, 1]), target_name="amd-mi300x")  # a tile per CU at least
    _, tile = TiledTranspose().plan(func, target)
    assert tile.size == 64 and tile.threads <= 256  # a wavefront-wide tile within ROCm's cap
    (kernel,) = kernel_resources.measure(compile_func(TiledTranspose().apply(func, target, False).mod["main"], target),
                                         target)
    assert kernel.threads_per_block == tile.threads
