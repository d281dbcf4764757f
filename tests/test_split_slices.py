"""Tests for SplitsIntoSlices: a split read only by matmuls becomes a slice per output, so that the
GEMM prologue rule computes each part of a packed projection in its matmul's loads (no copy kernel).
CPU only; checked:
- the bounds of each output, for sections and for indices;
- the rewrite computes what the split did (both modules run on the CPU, compared element by
  element), and drops the split;
- with ``layout_prologues`` no kernel is left for the split or for the reshape and transpose before
  it, each matmul reads ``qkv`` itself (the default); with the knob off the pass does not run;
- a split with another reader is kept, and its decision says which reader;
- the schedules of the fused matmuls compute what their unscheduled PrimFuncs compute.
"""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm
from tvm_fusion_hw.split_slices import SPLIT_SLICES, SplitsIntoSlices, split_bounds
from tir_checks import assert_schedule_preserves_numerics, prim_funcs

H200 = "nvidia-h200"
B, S, H, D = 2, 20, 2, 8  # batch, tokens, heads, head width


def attention_on(select, extra_reader: bool = False) -> tvm.IRModule:
    """A ViT-style attention on a packed projection: ``qkv -> reshape -> permute`` to
    ``(3, B, H, S, D)``, ``select(bb, moved)`` giving ``q, k, v``, then ``q * scale @ permute(k)``,
    softmax, ``@ v``; ``extra_reader``: ``v`` also added to the output (a reader that is not a
    matmul)."""
    bb = relax.BlockBuilder()
    qkv = relax.Var("qkv", relax.TensorType((B, S, 3 * H * D), "float32"))
    with bb.function("main", [qkv]):
        with bb.dataflow():
            heads = bb.emit(relax.op.reshape(qkv, (B, S, 3, H, D)))
            q, k, v = select(bb, bb.emit(relax.op.permute_dims(heads, [2, 0, 3, 1, 4])))
            scaled = bb.emit(relax.op.multiply(q, relax.const(D ** -0.5, "float32")))
            scores = bb.emit(relax.op.matmul(scaled, bb.emit(relax.op.permute_dims(k, [0, 1, 3, 2]))))
            out = bb.emit(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores, axis=-1)), v))
            if extra_reader:
                out = bb.emit(relax.op.add(out, v))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def split_three(bb, moved):
    parts = bb.emit(relax.op.split(moved, indices_or_sections=[1, 2], axis=0))
    return [bb.emit(relax.op.squeeze(bb.emit(relax.TupleGetItem(parts, i)), axis=[0])) for i in range(3)]


def take_three(bb, moved):
    """``moved[0]``, ``moved[1]``, ``moved[2]`` as the ONNX importer writes a Gather: the last
    index computed from the shape."""
    extent = bb.emit(relax.op.take(relax.op.shape_to_tensor(relax.op.shape_of(moved)),
                                   relax.const(0, "int64"), axis=0))
    last = bb.emit(relax.op.subtract(extent, relax.const(1, "int64")))  # 2, computed
    return [bb.emit(relax.op.take(moved, index, axis=0))
            for index in (relax.const(0, "int64"), relax.const(1, "int64"), last)]


def packed_attention(extra_reader: bool = False) -> tvm.IRModule:
    """The attention with ``q``, ``k``, ``v`` split apart (DeiT's ``qkv.unbind``)."""
    return attention_on(split_three, extra_reader)


def taken_attention() -> tvm.IRModule:
    """The attention with ``q``, ``k``, ``v`` taken by constant index (torchvision's ``qkv[0]``)."""
    return attention_on(take_three)


def run_cpu(mod: tvm.IRModule, data: np.ndarray) -> np.ndarray:
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(data)).numpy()


# ---- (1) the bounds -----------------------------------------------------------------------------
def _split_call(sections, extent=12):
    x = relax.Var("x", relax.TensorType((4, extent), "float32"))
    return relax.op.split(x, indices_or_sections=sections, axis=1)


def test_bounds_of_sections_and_of_indices():
    call = relax.BlockBuilder().normalize(_split_call(3))
    assert split_bounds(call) == [(0, 4), (4, 8), (8, 12)]
    call = relax.BlockBuilder().normalize(_split_call([2, 7]))
    assert split_bounds(call) == [(0, 2), (2, 7), (7, 12)]


# ---- (2) the rewrite computes the same ----------------------------------------------------------
def test_the_slices_compute_what_the_split_did():
    mod = packed_attention()
    rewrite = SplitsIntoSlices()
    sliced = rewrite(mod)
    assert "relax.split" not in sliced.script() and sliced.script().count("R.strided_slice") == 3
    assert [d.fused for d in rewrite.decisions] == [True]
    data = np.random.default_rng(0).standard_normal((B, S, 3 * H * D)).astype("float32")
    np.testing.assert_array_equal(run_cpu(sliced, data), run_cpu(mod, data))


def test_constant_takes_become_slices_and_compute_the_same():
    mod = taken_attention()
    rewrite = SplitsIntoSlices()
    sliced = rewrite(mod)
    assert mod.script().count("R.take(") == 4 and "R.take(" not in sliced.script()  # the index folded too
    assert sliced.script().count("R.strided_slice") == 3
    assert [(d.fused, d.consumer) for d in rewrite.decisions] == [(True, "3 takes")]
    data = np.random.default_rng(1).standard_normal((B, S, 3 * H * D)).astype("float32")
    np.testing.assert_array_equal(run_cpu(sliced, data), run_cpu(mod, data))


def take_three_clamped(bb, moved):
    """:func:`take_three` with the last index clamped at 0 by ``maximum``, arithmetic the pass does
    not evaluate itself."""
    extent = bb.emit(relax.op.take(relax.op.shape_to_tensor(relax.op.shape_of(moved)),
                                   relax.const(0, "int64"), axis=0))
    last = bb.emit(relax.op.maximum(bb.emit(relax.op.subtract(extent, relax.const(1, "int64"))),
                                    relax.const(0, "int64")))
    return [bb.emit(relax.op.take(moved, index, axis=0))
            for index in (relax.const(0, "int64"), relax.const(1, "int64"), last)]


def test_computed_indices_are_evaluated_and_only_where_a_take_could_become_a_slice(monkeypatch):
    """FoldConstant builds every op it folds (0.7 s for DeiT-T's one index, about 1 s on BERT's
    embeddings, whose takes no matmul reads): an index computed from static shapes with a few integer
    ops is evaluated by the pass, other arithmetic folded by FoldConstant, and only where a take with a
    computed index is read by matmuls alone; the slices are the same either way."""
    folds = []
    fold = relax.transform.FoldConstant
    monkeypatch.setattr(relax.transform, "FoldConstant", lambda: folds.append(1) or fold())
    SplitsIntoSlices()(attention_on(take_three, extra_reader=True))  # v is read by an add too
    SplitsIntoSlices()(taken_attention())
    assert folds == []
    data = np.random.default_rng(2).standard_normal((B, S, 3 * H * D)).astype("float32")
    for name, select in (("evaluated", take_three), ("folded", take_three_clamped)):
        rewrite, mod = SplitsIntoSlices(), attention_on(select)
        sliced = rewrite(mod)
        assert [(d.fused, d.consumer) for d in rewrite.decisions] == [(True, "3 takes")]
        assert "R.take(" not in sliced.script() and sliced.script().count("R.strided_slice") == 3
        np.testing.assert_array_equal(run_cpu(sliced, data), run_cpu(mod, data))
    assert folds == [1]  # the clamped index only


# ---- (3) the fusion -------------------------------------------------------------------------------
def test_each_matmul_reads_the_packed_projection_itself():
    target = hw.target(H200)
    fuse = hw.fusion_pass(target, layout_prologues=True)
    funcs = prim_funcs(fused_module(packed_attention(), target, fuse))
    assert not [n for n in funcs if "split" in n]
    matmuls = [n for n in funcs if "matmul" in n]
    assert len(matmuls) == 2 and all("strided_slice" in n and "transpose" in n for n in matmuls)
    assert len(funcs) == 3  # q @ k^T, softmax, p @ v: no copy kernel
    decision = next(d for d in fuse.report.decisions if d.rule == SPLIT_SLICES)
    assert decision.fused and decision.verdict == "slices"
    default = hw.fusion_pass(target, layout_prologues=False)  # no rewrite: the split is a kernel
    funcs = prim_funcs(fused_module(packed_attention(), target, default))
    assert [n for n in funcs if "split" in n] and not [d for d in default.report.decisions if d.rule == SPLIT_SLICES]


def test_a_split_with_another_reader_is_kept():
    rewrite = SplitsIntoSlices()
    kept = rewrite(packed_attention(extra_reader=True))
    assert "R.split" in kept.script()
    decision = rewrite.decisions[0]
    assert not decision.fused and decision.verdict == "split" and "relax.add" in decision.reason


# ---- (4) the fused matmuls' schedules compute the same --------------------------------------------
@pytest.mark.parametrize("which", ["scores", "values"])
def test_slice_prologue_schedules_compute_the_same(which):
    target = hw.target(H200)
    funcs = prim_funcs(fused_module(packed_attention(), target, hw.fusion_pass(target, layout_prologues=True)))
    # the scores' kernel scales q (multiply); the values' kernel reads v alone
    name = next(n for n in funcs if "matmul" in n and ("multiply" in n) == (which == "scores"))
    func = funcs[name].with_attr("global_symbol", "main")
    with target:
        _, tile, sch = ImplicitGemm().schedule_best(func, target)
    assert_schedule_preserves_numerics(func, sch, reassociates=tile.split_k > 1, blocks_reversed=True)


def test_readers_are_post_order_visits_reads_without_the_struct_info_walk():
    """The pass's readers of each variable (``_bindings``) are the variables ``post_order_visit``
    finds in each binding, on a model whose lifted parameters are one tuple (each ``params[i]``
    carries the whole tuple's struct info, which the pass no longer walks)."""
    from tvm_fusion_hw import split_slices  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.bundle.model_import import import_model  # pylint: disable=import-outside-toplevel

    mod = import_model("mobilenet_v2", 1)[1]
    checked = 0
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        _, readers, _ = split_slices._bindings(func)  # pylint: disable=protected-access
        expected = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                relax.analysis.post_order_visit(binding.value, lambda e, r=binding.var: isinstance(
                    e, relax.Var) and expected.setdefault(e, []).append(r))
        relax.analysis.post_order_visit(func.body.body, lambda e: isinstance(e, relax.Var) and expected.setdefault(
            e, []).append(None))
        assert readers.keys() == expected.keys()
        for var, found in expected.items():
            assert len(readers[var]) == len(found)
            assert all((r is None and f is None) or (r is not None and f is not None and r.same_as(f))
                       for r, f in zip(readers[var], found))
        checked += len(expected)
    assert "main_transform_params" in [gv.name_hint for gv in mod.get_global_vars()] and checked > 200
