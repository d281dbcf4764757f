"""Tests for schedules/elementwise/: the VectorizedElementwise schedule rule.

CPU only. Checked:
- the rule takes the fused groups of the eltwise5 and relu_add_mul micro-graphs (our fusion for
  the H200, batch 1 and 32) and BERT's head split (a reshape + transpose that keeps rows
  contiguous), with 4-lane fp32 vectors;
- several output blocks (attention's query/key/value split) are matched each on its own and run
  as a kernel each, with 4-lane vectors;
- it declines a transpose (also as one of two outputs), a strided load, a reduction, dynamic shapes, a tiny output, a CPU
  target; and on an H200 what cannot be vectorized (a misaligned offset, padding along the
  innermost axis, a per-channel scale over a plane no vector divides), where Fallback's
  1024-thread blocks fill an SM; on a 1536-thread SM (RTX 3060) it takes those with scalar
  accesses and its own grid;
- the register budget of full occupancy narrows the vectors of deep chains (H200: 4 lanes up to 4
  input streams, 2 up to 8, none beyond; MI300X: twice that) and ptxas stays within it;
- its schedules compute what the unscheduled PrimFunc computes (thread loops made serial, run
  with LLVM), also for a channel concat and a residual add over odd 7x7 planes;
- threads per block and vectors per thread follow the hardware profile (warp/wavefront, ROCm's
  256-thread cap, the SM count): blocks spread evenly over the SMs, more than one vector per
  thread only with at least a wave of resident threads;
- the CUDA kernels (sm_90) load and store ``float4`` and ptxas (when nvcc is present) reports no
  spills; fp16 uses 16-byte (``uint4``) accesses; the MI300X build (gfx942) links, 256 threads at
  most, no spills.
About 10 s on one core (the MI300X build and nvcc most of it).
"""

import re

import pytest
import tvm
from tvm import relax
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import kernel_resources
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.limits import gpu_limits, registers_per_thread_at_occupancy
from tvm_fusion_hw.schedules.elementwise.rule import ElementwiseOutputs, VectorizedElementwise
from tir_checks import (LLVM, assert_schedule_preserves_numerics, compile_func, cuda_source, fused_funcs, fused_graph,
                        kernel_body, prim_funcs, row_sum, run_model)

H200 = "nvidia-h200"
MICRO = {"eltwise5": "fused_relu_add_tir_sigmoid_multiply", "relu_add_mul": "fused_relu_add_multiply"}


# ---- helpers -----------------------------------------------------------------------------------
def pipeline(target):
    """``get_pipeline`` with this rule alone before dlight's rules (not the other templates)."""
    return hw.get_pipeline(target, schedules=[VectorizedElementwise()])


def chain_func(inputs, target, shape=(256, 1024)):
    """The one fused PrimFunc of ``acc = x0; acc = acc (+|*) x_i``: ``inputs`` streams."""
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i in range(inputs)]
    with bb.function("main", xs):
        with bb.dataflow():
            acc = xs[0]
            for i, x in enumerate(xs[1:]):
                acc = bb.emit((relax.op.add if i % 2 == 0 else relax.op.multiply)(acc, x))
            out = bb.emit_output(acc)
        bb.emit_func_output(out)
    (func,) = prim_funcs(fused_module(bb.get(), target, hw.fusion_pass(target, max_depth=64))).values()
    return func


def compile_model(model, target, batch=1):
    mod = import_onnx(build(model, batch=batch), keep_params_in_input=True)
    return tvm.compile(mod, target=target, relax_pipeline=pipeline(target))


# ---- synthetic PrimFuncs -----------------------------------------------------------------------
# pylint: disable=invalid-name,no-self-argument
@T.prim_func(private=True, s_tir=True)
def transpose(A: T.Buffer((64, 128), "float32"), B: T.Buffer((128, 64), "float32")):
    for i, j in T.grid(128, 64):
        with T.sblock("T"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vj, vi]


@T.prim_func(private=True, s_tir=True)
def strided(A: T.Buffer((64, 256), "float32"), B: T.Buffer((64, 128), "float32")):
    for i, j in T.grid(64, 128):
        with T.sblock("S"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj * 2]


@T.prim_func(private=True, s_tir=True)
def shifted(A: T.Buffer((64, 129), "float32"), B: T.Buffer((64, 128), "float32")):
    for i, j in T.grid(64, 128):
        with T.sblock("S"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj + 1]


@T.prim_func(private=True, s_tir=True)
def pad_w(A: T.Buffer((2, 16, 28, 26), "float32"), B: T.Buffer((2, 16, 28, 28), "float32")):
    for n, c, h, w in T.grid(2, 16, 28, 28):
        with T.sblock("pad"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            B[vn, vc, vh, vw] = T.if_then_else(1 <= vw and vw < 27, A[vn, vc, vh, vw - 1], T.float32(0))


@T.prim_func(private=True, s_tir=True)
def scale_7x7(A: T.Buffer((2, 32, 7, 7), "float32"), S: T.Buffer((32, 1, 1), "float32"),
              B: T.Buffer((2, 32, 7, 7), "float32")):
    for n, c, h, w in T.grid(2, 32, 7, 7):
        with T.sblock("mul"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            B[vn, vc, vh, vw] = A[vn, vc, vh, vw] * S[vc, 0, 0]


@T.prim_func(private=True, s_tir=True)
def dynamic(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, 128), "float32")
    B = T.match_buffer(b, (n, 128), "float32")
    for i, j in T.grid(n, 128):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = T.max(A[vi, vj], T.float32(0))


@T.prim_func(private=True, s_tir=True)
def tiny(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = T.max(A[vi, vj], T.float32(0))


@T.prim_func(private=True, s_tir=True)
def residual_7x7(A: T.Buffer((2, 160, 7, 7), "float32"), R: T.Buffer((2, 160, 7, 7), "float32"),
                 B: T.Buffer((2, 160, 7, 7), "float32")):
    for n, c, h, w in T.grid(2, 160, 7, 7):
        with T.sblock("add"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            B[vn, vc, vh, vw] = A[vn, vc, vh, vw] + R[vn, vc, vh, vw]


@T.prim_func(private=True, s_tir=True)
def concat_c(A: T.Buffer((2, 16, 28, 28), "float32"), B: T.Buffer((2, 8, 28, 28), "float32"),
             C: T.Buffer((2, 24, 28, 28), "float32")):
    for n, c, h, w in T.grid(2, 24, 28, 28):
        with T.sblock("cat"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            C[vn, vc, vh, vw] = T.if_then_else(vc < 16, A[vn, vc, vh, vw], B[vn, vc - 16, vh, vw])


@T.prim_func(private=True, s_tir=True)
def copy_and_transpose(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64, 128), "float32"),
                       C: T.Buffer((128, 64), "float32")):
    for i, j in T.grid(64, 128):
        with T.sblock("copy"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(128, 64):
        with T.sblock("transposed"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vj, vi]


def qkv_split(bb, x):
    """Attention's query/key/value split (timm's ViT): [B, N, 3*H*D] as [B, N, 3, H, D], heads
    first, three outputs."""
    batch, tokens, width = (int(d) for d in x.ty.shape)
    heads = 3
    parts = bb.emit(relax.op.reshape(x, (batch, tokens, 3, heads, width // (3 * heads))))
    return bb.emit(relax.op.split(bb.emit(relax.op.permute_dims(parts, [2, 0, 3, 1, 4])), 3, axis=0))


@T.prim_func(private=True, s_tir=True)
def bias_half(A: T.Buffer((4, 64, 32), "float16"), Bias: T.Buffer((32,), "float16"),
              C: T.Buffer((4, 64, 32), "float16")):
    for n, c, w in T.grid(4, 64, 32):
        with T.sblock("add"):
            vn, vc, vw = T.axis.remap("SSS", [n, c, w])
            C[vn, vc, vw] = A[vn, vc, vw] + Bias[vw]
# pylint: enable=invalid-name,no-self-argument


# ---- fixtures (h200: conftest.py) ------------------------------------------------------------
@pytest.fixture(scope="module")
def micro_funcs(h200):
    """{(model, batch): {name: PrimFunc}} of the micro-graphs fused for the H200."""
    return {(m, b): fused_funcs(m, b, h200) for m in MICRO for b in (1, 32)}


@pytest.fixture(scope="module")
def micro_builds(h200):
    """{model: executable} of the micro-graphs at batch 32 built for sm_90 with the rule."""
    return {m: compile_model(m, h200, batch=32) for m in MICRO}


# ---- what the rule takes -----------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("model", sorted(MICRO))
def test_applies_to_micro_graph_groups(micro_funcs, h200, model, batch):
    funcs = micro_funcs[(model, batch)]
    assert list(funcs) == [MICRO[model]]  # one fused element-wise group
    problem, plan = VectorizedElementwise().plan(funcs[MICRO[model]], h200)
    assert problem.lanes == 4  # fp32: 16-byte vectors
    assert problem.streams == (3 if model == "eltwise5" else 2)
    assert problem.broadcasts == (0 if model == "eltwise5" else 1)  # relu_add_mul's channel scale
    assert plan.threads % 32 == 0


def test_applies_to_bert_head_split_not_to_its_key_transpose(h200):
    # the copies as kernels of their own (layout prologues off; on, the output's copy joins the projection)
    funcs = fused_funcs("bert_encoder_layer", 1, h200, layout_prologues=False)
    rule = VectorizedElementwise()
    taken = sorted(n for n, f in funcs.items() if rule.apply(f, h200, False) is not None)
    # [1,128,768] -> [1,12,128,64] and back keep rows of 64 contiguous: vectors. The key's
    # transpose to [1,12,64,128] moves the innermost axis: Fallback's.
    assert taken == ["fused_reshape_transpose", "fused_transpose2_reshape1"]
    for name in taken:
        assert_schedule_preserves_numerics(funcs[name], rule.apply(funcs[name], h200, False))


@pytest.mark.parametrize("func", [transpose, row_sum, strided, shifted, pad_w, scale_7x7, dynamic, tiny,
                                  copy_and_transpose],
                         ids=["transpose", "reduction", "strided", "misaligned", "pad_w", "scale_7x7",
                              "dynamic", "tiny", "one_of_two_outputs_transposed"])
def test_declines(h200, func):
    assert VectorizedElementwise().apply(func, h200, False) is None


def test_several_outputs_are_a_kernel_each(h200):
    """A split (197 tokens: no power of two) writes three outputs: each output block is matched on
    its own, vectorized, and a kernel of its own, computing what the unscheduled PrimFunc does."""
    func = fused_graph((4, 197, 576), qkv_split)
    problem, plan = VectorizedElementwise().plan(func, h200)
    assert isinstance(problem, ElementwiseOutputs) and len(problem.parts) == 3
    assert [p.lanes for p in problem.parts] == [4, 4, 4]
    assert len(plan.plans) == 3 and "3 outputs, a kernel each" in plan.summary()
    sch = VectorizedElementwise().apply(func, h200, False)
    assert_schedule_preserves_numerics(func, sch)
    source = cuda_source(compile_func(sch.mod["main"], h200))
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", source))
    assert len(kernels) == 3, kernels
    for name in kernels:
        body = kernel_body(source, name)
        assert re.findall(r"= \*\(float4\*\)\(", body) and re.findall(r"\*\(float4\*\)\([^;]*\) = ", body), name


@pytest.mark.parametrize("func", [shifted, pad_w, scale_7x7], ids=["misaligned", "pad_w", "scale_7x7"])
def test_scalar_where_fallback_blocks_leave_an_sm_part_idle(func):
    """1536 threads per SM hold one of Fallback's 1024-thread blocks: the rule takes coalesced
    kernels it cannot vectorize, with scalar accesses and blocks that fill the SM."""
    target = hw.target("nvidia-rtx-3060")
    limits = gpu_limits(target)
    problem, plan = VectorizedElementwise().plan(func, target)
    assert problem.lanes == 1
    assert limits.profile.max_threads_per_multiprocessor % plan.threads == 0
    assert_schedule_preserves_numerics(func, VectorizedElementwise().apply(func, target, False))
    for other in (transpose, strided):  # not coalesced: still Fallback's
        assert VectorizedElementwise().apply(other, target, False) is None


@pytest.mark.parametrize("name, lanes", [
    ("nvidia-h200", {2: 4, 3: 4, 4: 4, 5: 2, 8: 2, 9: None, 13: None}),
    ("amd-mi300x", {2: 4, 8: 4, 12: 4, 13: 2, 24: 2, 25: None}),
])
def test_register_budget_narrows_vectors(name, lanes):
    """Every stream's vector is live at once: 16 + streams x V registers must keep full occupancy
    (32 registers per thread on an H200, 64 VGPRs on an MI300X)."""
    target = hw.target(name)
    rule = VectorizedElementwise()
    budget = registers_per_thread_at_occupancy(gpu_limits(target), rule.get_config(target).occupancy)
    assert budget == (32 if name == "nvidia-h200" else 64)
    for inputs, expected in lanes.items():
        planned = rule.plan(chain_func(inputs, target), target)
        assert (planned[0].lanes if planned else None) == expected, inputs
        if planned:
            assert planned[0].streams == inputs


def test_register_budget_holds_under_ptxas(h200):
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    rule = VectorizedElementwise()
    budget = registers_per_thread_at_occupancy(gpu_limits(h200), rule.get_config(h200).occupancy)
    for inputs in (3, 5, 8):
        sch = rule.apply(chain_func(inputs, h200), h200, False)
        (kernel,) = kernel_resources.measure_cuda_source(cuda_source(compile_func(sch.mod["main"], h200)), "sm_90")
        print(f"{inputs} streams: {kernel.registers} registers (budget {budget})")
        assert kernel.registers <= budget and not kernel.spills, inputs


def test_declines_cpu_targets(micro_funcs):
    func = micro_funcs[("eltwise5", 1)][MICRO["eltwise5"]]
    assert VectorizedElementwise().apply(func, LLVM, False) is None


# ---- semantics on the CPU -------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("model", sorted(MICRO))
def test_micro_graph_schedules_compute_the_same(micro_funcs, h200, model, batch):
    func = micro_funcs[(model, batch)][MICRO[model]]
    assert_schedule_preserves_numerics(func, VectorizedElementwise().apply(func, h200, False))


@pytest.mark.parametrize("func", [residual_7x7, concat_c], ids=["residual_7x7", "concat_c"])
def test_synthetic_schedules_compute_the_same(h200, func):
    problem, _ = VectorizedElementwise().plan(func, h200)
    assert problem.lanes == 4
    assert_schedule_preserves_numerics(func, VectorizedElementwise().apply(func, h200, False))


# ---- the grid follows the hardware profile -------------------------------------------------------
@pytest.mark.parametrize("name", ["nvidia-h200", "nvidia-rtx-3060", "amd-mi300x", "plain-cuda"])
def test_grid_follows_the_profile(micro_funcs, name):
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"}) if name == "plain-cuda" else hw.target(name)
    limits = gpu_limits(target)
    rule = VectorizedElementwise()
    cap = int(target.attrs["max_num_threads"])
    for (model, batch), funcs in micro_funcs.items():
        problem, plan = rule.plan(funcs[MICRO[model]], target)
        assert plan.threads % limits.profile.warp_size == 0, (model, batch)
        assert plan.threads <= min(cap, limits.profile.max_threads_per_block)
        assert plan.blocks * plan.threads * plan.vectors_per_thread >= problem.vectors
        assert plan.blocks >= limits.profile.multiprocessor_count  # every SM gets work
        assert plan.balance >= 0.85, (model, batch, plan)  # MI300X b1: 784 blocks of 64 on 304 CUs
        if plan.vectors_per_thread > 1:
            assert plan.blocks * plan.threads >= limits.resident_threads
        if batch == 32:  # 6.4 M elements: at least a wave of resident threads
            assert plan.waves >= 1.0, (model, plan)
    if target.kind.name == "rocm":
        assert limits.profile.warp_size == 64 and cap == 256


# ---- the CUDA kernels: float4, no spills ---------------------------------------------------------
@pytest.mark.parametrize("model", sorted(MICRO))
def test_sm90_kernels_use_float4_without_spills(micro_builds, model):
    source = cuda_source(micro_builds[model])
    body = kernel_body(source, f"{MICRO[model]}_kernel")
    loads = re.findall(r"= \*\(float4\*\)\(", body)
    stores = re.findall(r"\*\(float4\*\)\([^;]*\) = ", body)
    assert loads and stores, body
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found: float4 checked in the source only")
    measured = {k.name: k for k in kernel_resources.measure(micro_builds[model], hw.target(H200))}
    kernel = measured[f"{MICRO[model]}_kernel"]
    print(f"{model} b32: {kernel.registers} registers, {kernel.threads_per_block} threads x "
          f"{kernel.grid_blocks} blocks, spills {kernel.spill_store_bytes}/{kernel.spill_load_bytes}")
    assert kernel.spill_store_bytes == kernel.spill_load_bytes == kernel.stack_frame_bytes == 0
    _, plan = VectorizedElementwise().plan(
        fused_funcs(model, 32, hw.target(H200))[MICRO[model]], hw.target(H200))
    assert (kernel.threads_per_block, kernel.grid_blocks) == (plan.threads, plan.blocks)


def test_fp16_uses_16_byte_accesses(h200):
    problem, _ = VectorizedElementwise().plan(bias_half, h200)
    assert problem.lanes == 8 and problem.broadcasts == 0  # the bias moves with W: contiguous
    source = cuda_source(compile_func(VectorizedElementwise().apply(bias_half, h200, False).mod["main"], h200))
    assert re.search(r"\*\(uint4\*\)\([^;]*\) = ", source)


def test_mi300x_build():
    target = hw.target("amd-mi300x")
    if not toolchain.have_rocm_toolchain():
        pytest.skip("no ROCm toolchain (ld.lld 22, device libraries): run scripts/install-system-deps.sh")
    toolchain.configure_rocm()
    ex = compile_model("eltwise5", target, batch=32)
    (kernel,) = [k for k in kernel_resources.measure(ex, target) if k.name.startswith(MICRO["eltwise5"])]
    _, plan = VectorizedElementwise().plan(fused_funcs("eltwise5", 32, target)[MICRO["eltwise5"]], target)
    print(f"eltwise5 b32 gfx942: {kernel.registers} VGPRs, {kernel.threads_per_block} threads x "
          f"{kernel.grid_blocks} blocks")
    assert (kernel.threads_per_block, kernel.grid_blocks) == (plan.threads, plan.blocks)
    assert kernel.threads_per_block <= 256 and kernel.threads_per_block % 64 == 0
    assert not kernel.spills


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("model", sorted(MICRO))
def test_micro_graphs_on_gpu_match_llvm(model):
    import numpy as np  # pylint: disable=import-outside-toplevel

    gpu = run_model(model, 32, hw.target(H200), pipeline(hw.target(H200)), tvm.cuda(0))[0]
    cpu = run_model(model, 32, LLVM, hw.get_pipeline(LLVM, profile=H200), tvm.cpu())[0]
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)
