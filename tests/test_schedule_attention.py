"""Tests for schedules/attention/ and the fusion of attention (fusion/chain_rule.py).

CPU only. Checked:
- the rule's schedule computes what the fused PrimFunc computes (thread loops made serial, LLVM),
  and both equal a NumPy softmax attention, for a 256-token head, a masked and scaled BERT-like
  head and a 128-token head of dim 32 (at a batch whose heads leave a partial wave);
- its CUDA kernel (sm_90) builds, ptxas (where nvcc is present) reports no spills, and the shared
  memory TVM allocates fits the H200 and is within the template's plan or its correction;
- the fusion pass groups ``matmul -> (scale, mask) -> softmax -> matmul`` into one kernel on the
  H200 (stock FuseOps makes three), keeps three kernels where the keys and values of a head do
  not fit the profile's shared memory per block (384 keys on an RTX 4090's 99 KiB), and says so
  with the figure; keeps three kernels where its grid takes more than one wave (BERT's 12 heads at
  batch 32 on the H200; at batch 1 on an RTX 3060's 28 SMs, where the H200's 132 take it in one);
  on ROCm, where the template does not build, it keeps three; and for keys a lane
  cannot read as float4 (ViT's 197 tokens, Swin's 49) it keeps three and says why;
- the rule declines a plain matmul, a softmax alone, such keys and ROCm targets; a pipeline
  without the template builds the chain as three kernels (not the fused one on dlight).
"""

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir, tirx

import tvm_fusion_hw as hw
from tvm_fusion_hw.kernel_check import build_alone
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.pipeline import fused_module, kernel_names, stock_groups
from tvm_fusion_hw.schedules import Attention
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.attention.rule import merged_dynamic_shared_bytes
from tir_checks import assert_schedule_preserves_numerics, cuda_source, ptxas_kernels, run_llvm

H200 = "nvidia-h200"


def attention_module(batch, heads, tokens, head_dim, masked=False):
    """Relax ``softmax(q . kt [* 1/8 + mask]) . v`` with q, v ``[B, H, L, D]``, kt ``[B, H, D, L]``."""
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((batch, heads, tokens, head_dim), "float32"))
    kt = relax.Var("kt", relax.TensorType((batch, heads, head_dim, tokens), "float32"))
    v = relax.Var("v", relax.TensorType((batch, heads, tokens, head_dim), "float32"))
    params = [q, kt, v]
    if masked:
        params.append(relax.Var("mask", relax.TensorType((batch, 1, 1, tokens), "float32")))
    with bb.function("main", params):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(q, kt))
            if masked:
                s = bb.emit(relax.op.add(relax.op.multiply(s, relax.const(0.125, "float32")), params[3]))
            p = bb.emit(relax.op.nn.softmax(s, axis=-1))
            o = bb.emit_output(relax.op.matmul(p, v))
        bb.emit_func_output(o)
    return bb.get()


def fused_attention(profile, **shape):
    """The fused module of :func:`attention_module` under ``profile``'s fusion pass, and its kernels."""
    target = hw.target(profile)
    with hw.pass_context(target):
        fused = fused_module(attention_module(**shape), target, hw.fusion_pass(target))
    return fused, kernel_names(fused)


def numpy_attention(q, kt, v, mask=None):
    s = np.einsum("bhid,bhdj->bhij", q.astype("float64"), kt.astype("float64"))
    if mask is not None:
        s = s * 0.125 + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, v.astype("float64"))


SHAPES = {
    "long-head": dict(batch=1, heads=3, tokens=256, head_dim=64),
    "bert-masked": dict(batch=2, heads=2, tokens=128, head_dim=64, masked=True),
    "narrow-head": dict(batch=3, heads=1, tokens=128, head_dim=32),
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def scheduled(request):
    """(shape, fused PrimFunc, the rule's (problem, tile, schedule) on the H200)."""
    shape = SHAPES[request.param]
    fused, names = fused_attention(H200, **shape)
    assert len(names) == 1, names
    func = fused[names[0]]
    target = hw.target(H200)
    with hw.pass_context(target), target:
        planned = Attention().schedule_best(func, target)
    assert planned is not None
    return shape, func, planned


def test_stock_makes_three_kernels_and_we_make_one():
    target = hw.target(H200)
    stock = stock_groups(attention_module(**SHAPES["bert-masked"]), target)
    assert len(stock) == 3, stock  # the two matmuls (the first with its scale and mask) and softmax
    _, ours = fused_attention(H200, **SHAPES["bert-masked"])
    assert len(ours) == 1, ours


def test_schedule_preserves_numerics(scheduled):
    _, func, (_, _, sch) = scheduled
    assert_schedule_preserves_numerics(func, sch, reassociates=True)


def test_fused_function_is_softmax_attention(scheduled):
    """The oracle the schedule is compared with is itself attention: NumPy's."""
    shape, func, _ = scheduled
    rng = np.random.default_rng(1)
    args = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in func.params[:-1]]
    names = [p.name for p in func.params[:-1]]
    by_name = dict(zip(names, args))
    out = run_llvm(func, [a.copy() for a in args] + [np.full([int(d) for d in func.params[-1].ty.shape], np.nan, "float32")])
    want = numpy_attention(by_name["q"], by_name["kt"], by_name["v"], by_name.get("mask") if shape.get("masked") else None)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_cuda_kernel_builds_within_its_shared_memory(scheduled):
    _, _, (problem, tile, sch) = scheduled
    target = hw.target(H200)
    limits = gpu_limits(target)
    allocated = merged_dynamic_shared_bytes(sch.mod["main"], limits)
    assert 0 < allocated <= tile.shared_bytes <= limits.shared_limit("shared.dyn")
    # every key (head_dim x keys) of the head is on chip at once
    assert allocated >= problem.keys * problem.head_dim * problem.element_bytes
    with hw.pass_context(target):
        ex = build_alone("attention", sch.mod["main"], target)
    source = cuda_source(ex)
    assert "extern __shared__" in source and "__shfl_down_sync" in source
    if toolchain.have_nvcc():
        (kernel,) = ptxas_kernels(source).values()
        assert kernel.spill_store_bytes == 0 and kernel.spill_load_bytes == 0
        assert kernel.registers <= hw.load_profile(H200).max_registers_per_thread


def _decision(fused_pass):
    (decision,) = [d for d in fused_pass.report.decisions if d.figures.get("chain")]
    return decision


def test_fusion_follows_the_profiles_shared_memory():
    """384 keys of 64 floats: the keys' phase needs 120 KiB: fits an H200 (227 KiB a block), not an
    RTX 4090 (99 KiB), which keeps three kernels and names the figure."""
    shape = dict(batch=1, heads=2, tokens=384, head_dim=64)
    decisions = {}
    for profile in (H200, "nvidia-rtx-4090"):
        target = hw.target(profile)
        fuse = hw.fusion_pass(target)
        with hw.pass_context(target):
            fused = fused_module(attention_module(**shape), target, fuse)
        decisions[profile] = (_decision(fuse), len(kernel_names(fused)))
    (on_h200, h200_kernels), (on_rtx, rtx_kernels) = decisions[H200], decisions["nvidia-rtx-4090"]
    assert on_h200.fused and h200_kernels == 1
    assert not on_rtx.fused and on_rtx.staged and rtx_kernels == 3
    assert on_rtx.figures["plan_shared_bytes"] > 99 * 1024 == on_rtx.figures["shared_bytes_per_block_limit"]
    assert "99 KiB shared memory per block" in on_rtx.reason


def _fuse(profile, **shape):
    target = hw.target(profile)
    fuse = hw.fusion_pass(target)
    with hw.pass_context(target):
        fused = fused_module(attention_module(**shape), target, fuse)
    return _decision(fuse), len(kernel_names(fused))


def test_a_grid_of_several_waves_stays_three_kernels():
    bert = dict(heads=12, tokens=128, head_dim=64, masked=True)
    on_h200, kernels = _fuse(H200, batch=1, **bert)
    assert on_h200.fused and kernels == 1
    assert on_h200.figures["plan_blocks"] <= on_h200.figures["blocks_per_wave"]
    busy, kernels = _fuse(H200, batch=32, **bert)
    assert not busy.fused and kernels == 3 and "waves" in busy.reason
    assert busy.figures["plan_blocks"] > busy.figures["blocks_per_wave"]
    # the same batch-1 grid on 28 SMs: more than one wave (the profile's SM count decides)
    on_3060, kernels = _fuse("nvidia-rtx-3060", batch=1, **bert)
    assert not on_3060.fused and kernels == 3
    assert on_3060.figures["blocks_per_wave"] < on_3060.figures["plan_blocks"] <= on_h200.figures["blocks_per_wave"]


def test_rocm_keeps_three_kernels():
    target = hw.target("amd-mi300x")
    fuse = hw.fusion_pass(target)
    with hw.pass_context(target):
        fused = fused_module(attention_module(**SHAPES["long-head"]), target, fuse)
    assert len(kernel_names(fused)) == 3
    decision = _decision(fuse)
    assert not decision.fused and "rocm" in decision.reason


@pytest.mark.parametrize("tokens", [197, 49])
def test_keys_not_in_float4_columns_stay_three_kernels(tokens):
    fuse_target = hw.target(H200)
    fuse = hw.fusion_pass(fuse_target)
    with hw.pass_context(fuse_target):
        fused = fused_module(attention_module(batch=1, heads=3, tokens=tokens, head_dim=64), fuse_target, fuse)
    assert len(kernel_names(fused)) == 3
    decision = _decision(fuse)
    assert not decision.fused and "float4" in decision.reason


def test_declines_what_is_not_attention():
    target = hw.target(H200)
    x = relax.Var("x", relax.TensorType((2, 64, 64), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.softmax(relax.op.matmul(x, x)))
        bb.emit_func_output(y)
    fused = fused_module(bb.get(), target)  # stock: matmul and softmax apart
    with target:
        for name in kernel_names(fused):
            assert Attention().apply(fused[name], target, False) is None, name
    rocm = hw.target("amd-mi300x")
    fused, names = fused_attention(H200, **SHAPES["long-head"])
    with rocm:
        assert Attention().apply(fused[names[0]], rocm, False) is None
    # the same attention with 197 keys, fused by hand (the policy keeps it three kernels)
    mod = relax.transform.FuseOpsByPattern([("attention", _attention_pattern())], annotate_codegen=False)(
        attention_module(batch=1, heads=3, tokens=197, head_dim=64))
    funcs = [f for f in fused_module(mod, target).functions.values() if isinstance(f, tirx.PrimFunc)]
    assert len(funcs) == 1
    with target:
        assert Attention().apply(funcs[0], target, False) is None


def _attention_pattern():
    from tvm.relax.dpl import is_op, wildcard  # pylint: disable=import-outside-toplevel
    scores = is_op("relax.matmul")(wildcard(), wildcard())
    return is_op("relax.matmul")(is_op("relax.nn.softmax")(scores), wildcard())


def test_without_its_template_the_chain_is_built_apart():
    """A pipeline whose schedule list lacks the Attention template does not leave the fused kernel
    to dlight: the chain is refused and rebuilt as three kernels, the reason recorded."""
    from tvm_fusion_hw.schedules import RowReduction  # pylint: disable=import-outside-toplevel

    target = hw.target(H200)
    pipeline = hw.get_pipeline(target, schedules=[RowReduction()])
    with hw.pass_context(target):
        tvm.compile(attention_module(**SHAPES["bert-masked"]), target=target, relax_pipeline=pipeline)
    decision = _decision(pipeline.fuse_pass)
    assert not decision.fused and decision.staged and "no schedule template of the pipeline" in decision.reason
    rules = pipeline.schedule_pass.log.rules
    assert "softmax" in rules and rules["softmax"] == "RowReduction"


def test_explain_names_the_wave_and_the_missing_template():
    """explain's comparison of the chain decision names what decided it on each profile: the
    grid against one wave (H200 against RTX 3060), the reason where there is no plan (ROCm); not
    the arithmetic intensity, which the chain rule does not read."""
    from types import SimpleNamespace  # pylint: disable=import-outside-toplevel

    from tvm_fusion_hw.explain.compare import explain_difference  # pylint: disable=import-outside-toplevel

    bert = dict(batch=1, heads=12, tokens=128, head_dim=64, masked=True)
    profiles = [H200, "nvidia-rtx-3060", "amd-mi300x"]
    decisions = [_fuse(p, **bert)[0] for p in profiles]
    text = explain_difference(decisions, [SimpleNamespace(label=p, policy={}) for p in profiles])
    assert "blocks against one wave" in text and "nvidia-rtx-3060: 96 > 56" in text
    assert "amd-mi300x: matmul -> softmax -> matmul: the attention template does not take it on rocm" in text
    assert "intensity" not in text
