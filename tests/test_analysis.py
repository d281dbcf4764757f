"""Costs from the TIR with symbolic shapes: unknown figures say so instead of counting as zero."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.pipeline import fused_module


def symbolic_matmul_module():
    """``relu(x @ w)`` with ``x`` of shape ``(n, 768)``: a GEMM of unknown M."""
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 768), "float32"))
    w = relax.Var("w", relax.TensorType((768, 768), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w)))))
        bb.emit_func_output(out)
    return bb.get()


def test_a_symbolic_gemm_is_reported_symbolic_not_memory_bound():
    fuse = hw.fusion_pass("nvidia-h200")
    fused_module(symbolic_matmul_module(), tvm.target.Target({"kind": "llvm"}), fuse)
    (group,) = fuse.report.groups
    assert group.members == ["matmul", "relu"]
    assert group.regime == "symbolic" and "symbolic shape: FLOPs and bytes unknown" in group.line()
    assert "FLOP/B" not in group.line()
    (epilogue,) = fuse.report.decisions
    assert epilogue.fused and "intensity unknown (a symbolic dimension)" in epilogue.reason
    assert epilogue.figures["intensity_flop_per_byte"] is None


def test_a_static_gemm_keeps_its_figures():
    """The same GEMM with M = 32: 2*32*768*768 FLOPs, compute-bound on the H200 (ridge ~14)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((32, 768), "float32"))
    w = relax.Var("w", relax.TensorType((768, 768), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w)))))
        bb.emit_func_output(out)
    fuse = hw.fusion_pass("nvidia-h200")
    fused_module(bb.get(), tvm.target.Target({"kind": "llvm"}), fuse)
    (group,) = fuse.report.groups
    assert group.flops == pytest.approx(2 * 32 * 768 * 768, rel=0.01)
    assert group.compulsory_bytes == 4 * (32 * 768 + 768 * 768 + 32 * 768)
    assert group.regime == "compute-bound"


def dynamic_batch(model):
    for value in list(model.graph.input) + list(model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    del model.graph.value_info[:]
    return model


@pytest.fixture(scope="module")
def dynamic_conv_relu_pool():
    return dynamic_batch(build("conv_relu_pool", batch=1))


def test_a_dynamic_batch_builds_for_the_gpu(dynamic_conv_relu_pool):
    """A symbolic batch compiles through the plugin for CUDA: the templates decline what they cannot
    tile and dlight schedules it."""
    target = hw.target("nvidia-h200")
    mod = relax.transform.LiftTransformParams()(import_onnx(dynamic_conv_relu_pool, keep_params_in_input=True))
    pipeline = hw.get_pipeline(target)
    tvm.compile(mod, target=target, relax_pipeline=pipeline)
    assert pipeline.schedule_pass.log.rules
    assert any(g.regime == "symbolic" for g in pipeline.fuse_pass.report.groups)


def test_a_dynamic_batch_runs_like_stock_on_llvm(dynamic_conv_relu_pool):
    """One executable, two batch sizes, the same outputs as stock TVM's."""
    mod = import_onnx(dynamic_conv_relu_pool, keep_params_in_input=False)
    target = tvm.target.Target({"kind": "llvm"})
    ours = tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target, profile="nvidia-h200"))
    stock = tvm.compile(mod, target=target)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        x = rng.standard_normal((batch, *[int(d.dim_value) for d in
                                          dynamic_conv_relu_pool.graph.input[0].type.tensor_type.shape.dim[1:]]),
                                dtype=np.float32)
        outs = []
        for ex in (ours, stock):
            vm = relax.VirtualMachine(ex, tvm.cpu())
            outs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
        assert outs[0].shape[0] == batch
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
