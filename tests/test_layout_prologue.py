"""Tests for layout prologues: copies that move elements (a transpose, a reshape) computed inside a
contraction's operand loads.

Attention's key is transposed before ``q @ k^T`` and its output transposed and reshaped before the
projection; stock FuseOps runs each copy as a kernel of its own. With ``layout_prologues`` the
GEMM's loads read the copy's input through the composed index. CPU only; checked:
- the index composed through the copies (schedules/base/source_access.py), and the copy direction
  it gives: a transposed operand is copied along the other axis;
- the fusion: the transpose joins the matmul (one kernel) with ``layout_prologues=True``, not by
  default, not with ``layout_prologues=False``, never under stock FuseOps; a concatenation is declined, and the decision says so;
- the schedules compute what the unscheduled fused PrimFuncs compute (by hand, and BERT's two
  batched matmuls with their reshapes and transposes);
- a copy that computes nothing keeps ``cp.async``, in the plan asked before fusion and in the
  fused kernel's CUDA source.
"""

import pytest
import tvm
from tvm import relax, s_tir, te, topi

import tvm_fusion_hw as hw
from tvm_fusion_hw.fusion.calibrations import CALIBRATIONS, calibration_key
from tvm_fusion_hw.fusion.prologue_rule import GEMM_PROLOGUE
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.prologue import selects_among_inputs
from tvm_fusion_hw.schedules.base.source_access import source_access
from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm, prologue_plan
from tir_checks import assert_schedule_preserves_numerics, fused_funcs, prim_funcs

H200 = "nvidia-h200"


# ---- PrimFuncs built by hand ----------------------------------------------------------------------
def _named(func):
    return func.with_attr("global_symbol", "main")


def scores_funcs(b=2, h=2, s=50, d=32):
    """``(producer, consumer, fused, materialized)``: ``q @ transpose(k)`` per head, the transpose
    alone, the matmul of a transposed key passed in, and the two fused."""
    q = te.placeholder((b, h, s, d), name="q")
    k = te.placeholder((b, h, s, d), name="k")
    kt_in = te.placeholder((b, h, d, s), name="kt")

    def transpose(x):
        return te.compute((b, h, d, s), lambda n, c, i, j: x[n, c, j, i], name="T_transpose")

    def scores(kt):
        r = te.reduce_axis((0, d), name="r")
        return te.compute((b, h, s, s), lambda n, c, i, j: te.sum(q[n, c, i, r] * kt[n, c, r, j], axis=r),
                          name="matmul")

    producer = te.create_prim_func([k, transpose(k)])
    consumer = te.create_prim_func([q, kt_in, scores(kt_in)])
    fused = te.create_prim_func([q, k, scores(transpose(k))])
    return producer, consumer, _named(fused), _named(consumer)


def projection_func(b=2, s=50, h=2, d=32, n=48):
    """``reshape(transpose(o), [b, s, h * d]) @ w``: attention's output into its projection."""
    o = te.placeholder((b, h, s, d), name="o")
    w = te.placeholder((h * d, n), name="w")
    swapped = te.compute((b, s, h, d), lambda i, t, c, e: o[i, c, t, e], name="T_transpose")
    merged = te.compute((b, s, h * d), lambda i, t, f: swapped[i, t, f // d, f % d], name="T_reshape")
    r = te.reduce_axis((0, h * d), name="r")
    out = te.compute((b, s, n), lambda i, t, j: te.sum(merged[i, t, r] * w[r, j], axis=r), name="matmul")
    return _named(te.create_prim_func([o, w, out]))


# ---- (1) the composed index, and the copy direction it gives -------------------------------------
def test_source_access_follows_a_transpose():
    _, _, fused, _ = scores_funcs()
    sch = s_tir.Schedule(fused)
    block = sch.get_sblock("matmul")
    n, c, _, j, r = (iv.var for iv in sch.get(block).iter_vars)
    buffer, indices = source_access(sch, block, 1)
    assert buffer.name == "k"  # the transpose's input, not its output
    assert [str(i) for i in indices] == [str(n), str(c), str(j), str(r)]  # k[n, c, j, r]
    buffer, _ = source_access(sch, block, 0)
    assert buffer.name == "q"  # a parameter: read as it is


def test_source_access_follows_a_transpose_and_a_reshape():
    sch = s_tir.Schedule(projection_func())
    block = sch.get_sblock("matmul")
    i, t, _, r = (iv.var for iv in sch.get(block).iter_vars)
    buffer, indices = source_access(sch, block, 0)
    assert buffer.name == "o"
    # merged[i, t, r] = o[i, r // 32, t, r % 32]
    assert [str(x) for x in indices] == [str(i), f"{r} // 32", str(t), f"{r} % 32"]


def test_element_wise_producers_leave_the_operand_as_read():
    """An SE scale and a 1x1 conv's identity padding read element for element: the operand's own
    index stands (the layout facts of every kernel without a layout prologue stay as they were)."""
    x, s = te.placeholder((2, 8, 6, 6), name="x"), te.placeholder((2, 8, 1, 1), name="s")
    w = te.placeholder((4, 8, 1, 1), name="w")
    scaled = te.compute(x.shape, lambda n, c, h, v: x[n, c, h, v] * s[n, c, 0, 0], name="multiply")
    sch = s_tir.Schedule(_named(te.create_prim_func([x, s, w, topi.nn.conv2d_nchw(scaled, w, 1, 0, 1)])))
    block = sch.get_sblock("conv2d_nchw")
    read = sch.get(block).reads[0]
    buffer, indices = source_access(sch, block, 0)
    assert buffer.same_as(read.source) and [str(i) for i in indices] == [str(r.min) for r in read.region]


def test_a_transposed_operand_is_copied_along_the_other_axis():
    """Materialised, ``kt[n, c, r, j]`` is contiguous along J (copied along the output columns);
    read through the transpose, ``k[n, c, j, r]`` is contiguous along K (copied along K)."""
    _, _, fused, materialized = scores_funcs()
    target = hw.target(H200)
    with hw.pass_context(target):
        copied, _ = ImplicitGemm().plan(materialized, target)
        inlined, _ = ImplicitGemm().plan(fused, target)
    assert copied.fetch_spatial_inner == (False, True)
    assert inlined.fetch_spatial_inner == (False, False)
    assert inlined.prologue_instructions == (0, 0)  # a copy computes nothing


# ---- (2) the fusion ------------------------------------------------------------------------------
def attention_scores_module():
    """``q @ permute(k)``, and the projection of a transposed, reshaped output, as Relax."""
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((2, 2, 50, 32), "float32"))
    k = relax.Var("k", relax.TensorType((2, 2, 50, 32), "float32"))
    w = relax.Var("w", relax.TensorType((64, 48), "float32"))
    with bb.function("main", [q, k, w]):
        with bb.dataflow():
            kt = bb.emit(relax.op.permute_dims(k, [0, 1, 3, 2]))
            scores = bb.emit(relax.op.matmul(q, kt))
            swapped = bb.emit(relax.op.permute_dims(q, [0, 2, 1, 3]))
            merged = bb.emit(relax.op.reshape(swapped, (2, 50, 64)))
            proj = bb.emit(relax.op.matmul(merged, w))
            out = bb.emit_output(relax.Tuple([scores, proj]))
        bb.emit_func_output(out)
    return bb.get()


def kernels(mod, fuse):
    return sorted(prim_funcs(fused_module(mod, hw.target(H200), fuse)))


def test_the_copies_join_their_matmuls_only_with_the_rule():
    target = hw.target(H200)
    fuse = hw.fusion_pass(target, layout_prologues=True)
    assert kernels(attention_scores_module(), fuse) == ["fused_transpose1_reshape_matmul1", "fused_transpose_matmul"]
    decisions = [d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE]
    assert len(decisions) == 2 and all(d.fused and d.reason.startswith("layout -> matmul") for d in decisions)
    apart = ["fused_transpose1_reshape", "matmul", "matmul1", "transpose"]
    assert kernels(attention_scores_module(), hw.fusion_pass(target)) == kernels(attention_scores_module(), fuse)
    assert kernels(attention_scores_module(), hw.fusion_pass(target, layout_prologues=False)) == apart
    assert kernels(attention_scores_module(), None) == apart  # stock FuseOps: each copy a kernel


def test_a_concatenation_is_declined_with_its_reason():
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((32, 40), "float32"))
    b = relax.Var("b", relax.TensorType((32, 24), "float32"))
    w = relax.Var("w", relax.TensorType((64, 16), "float32"))
    with bb.function("main", [a, b, w]):
        with bb.dataflow():
            joined = bb.emit(relax.op.concat([a, b], axis=1))
            out = bb.emit_output(relax.op.matmul(joined, w))
        bb.emit_func_output(out)
    fuse = hw.fusion_pass(hw.target(H200), layout_prologues=True)
    assert len(kernels(bb.get(), fuse)) == 2
    decision = next(d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE)
    assert not decision.fused and decision.reason.startswith("layout -> matmul") and "cannot compute" in decision.reason


def test_a_layout_prologue_is_weighed_by_the_copies_measured_calibration():
    """ViT-B/16's qkv projection at batch 32 reads its input through a transpose. Weighed with the
    squeeze-and-excitation calibration (computed prologues) it stayed apart (fused 835.9 against
    795.1 us); the layout calibration, measured on those kernels (fused 1.62x its plan, the GEMM alone
    1.63x), fuses it. A computed prologue still takes the other calibration."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((32, 197, 768), "float32"))
    w = relax.Var("w", relax.TensorType((768, 2304), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            tokens_first = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
            out = bb.emit_output(relax.op.matmul(tokens_first, w))
        bb.emit_func_output(out)
    fuse = hw.fusion_pass(hw.target("nvidia-h100-sxm"))
    assert kernels(bb.get(), fuse) == ["fused_transpose_matmul"]
    (decision,) = [d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE]
    assert decision.fused and decision.reason.startswith("layout -> matmul")
    layout = CALIBRATIONS[calibration_key("ImplicitGemm", layout_prologue=True)]
    assert decision.figures["calibration"] == layout.source != CALIBRATIONS["ImplicitGemm"].source
    assert decision.figures["model_error_fused"] == pytest.approx(layout.k_fused, abs=1e-3)


def test_a_lone_reshape_stays_a_view_apart_from_its_matmul():
    """GPT-2's layer norm output reshaped to rows before its projection: apart, TVM's
    RewriteDataflowReshape makes the reshape a view (no kernel), so the loads would only gain its
    index arithmetic. The rule keeps it apart, and the built module reshapes by view; a reshape
    with a transpose before it moves elements and still joins
    (test_the_copies_join_their_matmuls_only_with_the_rule)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((32, 128, 768), "float32"))
    g = relax.Var("g", relax.TensorType((768,), "float32"))
    w = relax.Var("w", relax.TensorType((768, 2304), "float32"))
    with bb.function("main", [x, g, w]):
        with bb.dataflow():
            normed = bb.emit(relax.op.nn.layer_norm(x, g, g, axes=[-1]))
            rows = bb.emit(relax.op.reshape(normed, (32 * 128, 768)))
            out = bb.emit_output(relax.op.matmul(rows, w))
        bb.emit_func_output(out)
    target = hw.target("nvidia-h100-sxm")
    pipeline = hw.get_pipeline(target, build_kernels=False, verify="none")
    with target, hw.pass_context(target):
        built = pipeline(bb.get())
    (decision,) = [d for d in pipeline.fuse_pass.report.decisions if d.rule == GEMM_PROLOGUE]
    assert not decision.fused and "only reshapes" in decision.reason
    main = built["main"].script()
    assert "vm.builtin.reshape" in main and "reshape(" not in main.replace("vm.builtin.reshape", "")


def test_a_copy_that_also_computes_is_weighed_as_a_computed_prologue():
    """A reshape with a scale after it (PoolFormer's layer scale before its 1x1 conv) loses
    cp.async like any computed prologue: the computed prologues' calibration weighs it."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((32, 49, 512), "float32"))
    s = relax.Var("s", relax.TensorType((512,), "float32"))
    w = relax.Var("w", relax.TensorType((512, 2048), "float32"))
    with bb.function("main", [x, s, w]):
        with bb.dataflow():
            rows = bb.emit(relax.op.reshape(x, (32 * 49, 512)))
            scaled = bb.emit(relax.op.multiply(rows, s))
            out = bb.emit_output(relax.op.matmul(scaled, w))
        bb.emit_func_output(out)
    fuse = hw.fusion_pass(hw.target("nvidia-h100-sxm"))
    kernels(bb.get(), fuse)
    (decision,) = [d for d in fuse.report.decisions if d.rule == GEMM_PROLOGUE]
    assert decision.reason.startswith("layout -> matmul") and "cost_fused_us" in decision.figures
    assert decision.figures["calibration"] == CALIBRATIONS["ImplicitGemm"].source


def test_a_concatenation_selects_and_a_padding_does_not():
    a, b = te.placeholder((4, 3), name="a"), te.placeholder((4, 5), name="b")
    joined = te.compute((4, 8), lambda i, j: te.if_then_else(j < 3, a[i, j], b[i, j - 3]), name="concat")
    padded = te.compute((4, 5), lambda i, j: te.if_then_else(j < 3, a[i, j], 0.0), name="pad")
    assert selects_among_inputs(te.create_prim_func([a, b, joined]))
    assert not selects_among_inputs(te.create_prim_func([a, padded]))


# ---- (3) the schedules compute the same ----------------------------------------------------------
CASES = {"scores": lambda: scores_funcs()[2], "projection": projection_func}


@pytest.fixture(scope="module")
def bert_layer():
    """BERT's encoder layer at batch 1 fused with layout prologues (no attention chain: its batched
    matmuls stay GEMMs)."""
    return fused_funcs("bert_encoder_layer", 1, hw.target(H200), attention=False, layout_prologues=True)


@pytest.mark.parametrize("name", ["fused_reshape_transpose_matmul2",  # p @ v, v read through the copies
                                  "fused_reshape_transpose_transpose1_matmul1_divide"])  # q @ k^T
def test_bert_batched_matmuls_with_their_copies_compute_the_same(bert_layer, name):
    func = bert_layer[name]
    target = hw.target(H200)
    with target:
        _, tile, sch = ImplicitGemm().schedule_best(func, target)
    assert_schedule_preserves_numerics(func, sch, reassociates=tile.split_k > 1, blocks_reversed=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layout_prologue_schedules_compute_the_same(case):
    func = CASES[case]()
    target = hw.target(H200)
    with target:
        _, tile, sch = ImplicitGemm().schedule_best(func, target)
    assert_schedule_preserves_numerics(func, sch, reassociates=tile.split_k > 1)


# ---- (4) a copy keeps cp.async -----------------------------------------------------------------
def test_a_copy_prologue_keeps_cp_async_as_planned():
    producer, consumer, fused, _ = scores_funcs(b=1, h=1, s=2048, d=1024)
    target = hw.target(H200)
    with hw.pass_context(target):
        asked = prologue_plan([producer], consumer, 1, target)
        problem, tile = ImplicitGemm().plan(fused, target)
    assert tile.async_stages > 1  # a GEMM this large takes cp.async on the H200 profile
    assert (asked.threads_per_block, asked.shared_bytes, asked.registers_per_thread, asked.blocks) == \
        (tile.threads, tile.shared_bytes, tile.registers_estimate, tile.blocks)
    assert problem.fetch_spatial_inner == (False, False)
    if not toolchain.have_nvcc():
        pytest.skip("nvcc not found")
    with hw.pass_context(target):
        with target:
            _, _, sch = ImplicitGemm().schedule_best(fused, target)
        ex = tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=target)
    assert "cp.async" in ex.mod.imports[0].inspect_source()


def packed_scores_func(b=2, h=3, s=50, d=32):
    """``q @ k^T`` per head with q and k read out of one packed ``x[b, s, 3 x h x d]`` (a ViT's qkv
    projection through its reshape, permute and split): the head index sits in the innermost index."""
    x = te.placeholder((b, s, 3 * h * d), name="x")
    q = te.compute((b, h, s, d), lambda n, c, i, e: x[n, i, c * d + e], name="q")
    kt = te.compute((b, h, d, s), lambda n, c, e, j: x[n, j, h * d + c * d + e], name="kt")
    r = te.reduce_axis((0, d), name="r")
    out = te.compute((b, h, s, s), lambda n, c, i, j: te.sum(q[n, c, i, r] * kt[n, c, r, j], axis=r), name="matmul")
    return _named(te.create_prim_func([x, out]))


def test_a_head_in_the_innermost_index_still_copies_along_k():
    """The packed operands are contiguous along each head's dim (K); the head (the GEMM's batch)
    in the same index does not make them contiguous along the rows: copied along K, as a plain
    ``q @ k^T`` read through its transpose (before, along the tokens: 576 floats apart a lane on
    DeiT-T, 8 TFLOP/s in corpus-10's sweep)."""
    func = packed_scores_func()
    target = hw.target(H200)
    with hw.pass_context(target):
        problem, _ = ImplicitGemm().plan(func, target)
        sch = ImplicitGemm().apply(func, target, False)
    assert problem.fetch_spatial_inner == (False, False)
    assert sch is not None
    assert_schedule_preserves_numerics(func, sch, reassociates=True)
