"""Before/Expected structural tests of HardwareAwareFuseOps on the rules' micro-graphs.

Both modules are written at the Relax operator level and lowered with the same LegalizeOps and
AnnotateTIROpPattern, so the comparison checks only the grouping the pass makes (the grouped
functions, their parameters and outputs, and main's calls). Compare TVM's own
tests/python/relax/test_transform_fuse_ops.py.
"""

import tvm
import tvm.testing
import tvm_ffi
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_fusion_hw as hw
from tvm_fusion_hw.pipeline import fused_module, kernel_names, stock_groups


def lower(mod):
    return tvm.transform.Sequential(
        [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()]
    )(mod)


#: Treat both complex pairs as templated, so these tests check the hardware rules alone.
BOTH_PAIRS = ("conv->window", "depthwise_conv->pointwise_conv")


def fuse(mod, profile, **knobs):
    knobs.setdefault("pair_templates", BOTH_PAIRS)
    return hw.fusion_pass(profile, **knobs)(lower(mod))


# ---- conv + ReLU + 2x2 max-pool, conv_relu_pool's shape at batch 32 --------------------------
@I.ir_module
class ConvReluPool:
    @R.function
    def main(x: R.Tensor((32, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            b = R.nn.relu(a)
            c = R.nn.max_pool2d(b, pool_size=[2, 2], strides=[2, 2])
            R.output(c)
        return c


@I.ir_module
class ConvReluPoolFusedOnChip:
    """H200: one kernel, ConvPool's plan (256 threads, ~128 regs) keeps 16 warps an SM, more than
    the unfused conv as ImplicitGemm plans it (ptxas agrees: 16 against 12)."""

    @R.function(private=True)
    def fused_conv2d_relu_max_pool2d(
        x: R.Tensor((32, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")
    ) -> R.Tensor((32, 64, 56, 56), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            b = R.nn.relu(a)
            c = R.nn.max_pool2d(b, pool_size=[2, 2], strides=[2, 2])
            R.output(c)
        return c

    @R.function
    def main(x: R.Tensor((32, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")):
        cls = ConvReluPoolFusedOnChip
        with R.dataflow():
            c = cls.fused_conv2d_relu_max_pool2d(x, w)
            R.output(c)
        return c


@I.ir_module
class ConvReluPoolStaged:
    """conv+ReLU, then the pool: what a policy that keeps the pair apart makes of ConvReluPool."""

    @R.function(private=True)
    def fused_conv2d_relu(
        x: R.Tensor((32, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")
    ) -> R.Tensor((32, 64, 112, 112), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            b = R.nn.relu(a)
            R.output(b)
        return b

    @R.function
    def main(x: R.Tensor((32, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")):
        cls = ConvReluPoolStaged
        with R.dataflow():
            b = cls.fused_conv2d_relu(x, w)
            c = R.nn.max_pool2d(b, pool_size=[2, 2], strides=[2, 2])
            R.output(c)
        return c


@I.ir_module
class ConvReluPoolB1:
    @R.function
    def main(x: R.Tensor((1, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            b = R.nn.relu(a)
            c = R.nn.max_pool2d(b, pool_size=[2, 2], strides=[2, 2])
            R.output(c)
        return c


@I.ir_module
class ConvReluPoolB1Staged:
    """Jetson AGX Orin at batch 1: ConvPool's plan would keep 29% of an SM's threads resident
    where the conv apart, as ImplicitGemm plans it, keeps 42%: staged, conv+ReLU, then the pool."""

    @R.function(private=True)
    def fused_conv2d_relu(
        x: R.Tensor((1, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")
    ) -> R.Tensor((1, 64, 112, 112), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            b = R.nn.relu(a)
            R.output(b)
        return b

    @R.function
    def main(x: R.Tensor((1, 64, 112, 112), "float32"), w: R.Tensor((64, 64, 3, 3), "float32")):
        cls = ConvReluPoolB1Staged
        with R.dataflow():
            b = cls.fused_conv2d_relu(x, w)
            c = R.nn.max_pool2d(b, pool_size=[2, 2], strides=[2, 2])
            R.output(c)
        return c


def test_conv_pool_fused_on_h200():
    tvm.ir.assert_structural_equal(fuse(ConvReluPool, "nvidia-h200"), lower(ConvReluPoolFusedOnChip))


def test_conv_pool_staged_on_orin_fused_on_h200_at_batch_1():
    pass_ = hw.fusion_pass("nvidia-jetson-agx-orin", pair_templates=BOTH_PAIRS)
    tvm.ir.assert_structural_equal(pass_(lower(ConvReluPoolB1)), lower(ConvReluPoolB1Staged))
    (decision,) = pass_.report.find("complex-pair")
    assert decision.staged and decision.figures["occupancy_drop"] > 0.2
    h200 = fuse(ConvReluPoolB1, "nvidia-h200")
    groups = [gv.name_hint for gv, f in h200.functions.items() if isinstance(f, relax.Function) and gv.name_hint != "main"]
    assert groups == ["fused_conv2d_relu_max_pool2d"]


def test_complex_pairs_knob_turns_the_pair_off():
    after = fuse(ConvReluPool, "nvidia-h200", fuse_complex_pairs=False)
    tvm.ir.assert_structural_equal(after, lower(ConvReluPoolStaged))


def test_pair_without_a_template_stays_apart():
    """Without a template dlight would stage the pair through global memory: no gain."""
    pass_ = hw.fusion_pass("nvidia-h200", pair_templates=())
    after = pass_(lower(ConvReluPool))
    tvm.ir.assert_structural_equal(after, lower(ConvReluPoolStaged))
    (decision,) = pass_.report.find("complex-pair")
    assert "would fit and keep occupancy" in decision.reason and "no schedule template" in decision.reason


# ---- element-wise chain with a diamond --------------------------------------------------------
@I.ir_module
class Diamond:
    @R.function
    def main(x: R.Tensor((8, 256), "float32"), y: R.Tensor((8, 256), "float32")):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.add(a, y)
            c = R.multiply(a, y)
            d = R.add(b, c)
            R.output(d)
        return d


@I.ir_module
class DiamondFused:
    @R.function(private=True)
    def fused_relu_add_multiply(
        x: R.Tensor((8, 256), "float32"), y: R.Tensor((8, 256), "float32")
    ) -> R.Tensor((8, 256), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.add(a, y)
            c = R.multiply(a, y)
            d = R.add(b, c)
            R.output(d)
        return d

    @R.function
    def main(x: R.Tensor((8, 256), "float32"), y: R.Tensor((8, 256), "float32")):
        cls = DiamondFused
        with R.dataflow():
            d = cls.fused_relu_add_multiply(x, y)
            R.output(d)
        return d


def test_memory_bound_diamond_is_one_group():
    tvm.ir.assert_structural_equal(fuse(Diamond, "nvidia-h200"), lower(DiamondFused))


def test_max_depth_knob_splits_the_chain():
    after = fuse(Diamond, "nvidia-h200", max_depth=1)
    tvm.ir.assert_structural_equal(after, lower(Diamond))


def test_stock_max_depth_key_is_an_upper_bound():
    with tvm.transform.PassContext(config={"relax.FuseOps.max_depth": 1}):
        after = fuse(Diamond, "nvidia-h200")
    tvm.ir.assert_structural_equal(after, lower(Diamond))


# ---- a value that leaves the group: two outputs ---------------------------------------------
@I.ir_module
class TwoOutputs:
    @R.function
    def main(x: R.Tensor((1, 16, 8, 8), "float32"), w: R.Tensor((16, 16, 1, 1), "float32")):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.nn.conv2d(a, w)
            c = R.add(b, a)
            R.output(c)
        return c


def test_groups_stay_acyclic_and_numerically_equal():
    """relu feeds both the conv and the residual add: grouping must keep the graph valid."""
    import numpy as np

    after = relax.transform.FuseTIR()(fuse(TwoOutputs, "nvidia-h200"))
    relax.analysis.well_formed(after)  # raises on a violation
    target = tvm.target.Target({"kind": "llvm"})
    stock = tvm.compile(TwoOutputs, target=target)
    ours = tvm.compile(TwoOutputs, target=target,
                       relax_pipeline=hw.get_pipeline(target, profile="nvidia-h200"))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, 16, 8, 8), dtype="float32"),
            rng.standard_normal((16, 16, 1, 1), dtype="float32")]
    outs = [relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()
            for ex in (stock, ours)]
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


# ---- MobileNetV2 bottleneck: depthwise 3x3 + ReLU6, then pointwise 1x1 ---------------------
@I.ir_module
class DepthwisePointwise:
    @R.function
    def main(x: R.Tensor((1, 144, 28, 28), "float32"), dw: R.Tensor((144, 1, 3, 3), "float32"),
             pw: R.Tensor((24, 144, 1, 1), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, dw, padding=[1, 1, 1, 1], groups=144)
            b = R.clip(a, R.prim_value(0), R.prim_value(6))
            c = R.nn.conv2d(b, pw)
            R.output(c)
        return c


@I.ir_module
class DepthwisePointwiseOneKernel:
    """H200: all 144 channels of 64 pixels (36 KiB) stay in shared memory for the 1x1 conv."""

    @R.function(private=True)
    def fused_conv2d_tir_clip_conv2d1(
        x: R.Tensor((1, 144, 28, 28), "float32"), dw: R.Tensor((144, 1, 3, 3), "float32"),
        pw: R.Tensor((24, 144, 1, 1), "float32"),
    ) -> R.Tensor((1, 24, 28, 28), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.conv2d(x, dw, padding=[1, 1, 1, 1], groups=144)
            b = R.clip(a, R.prim_value(0), R.prim_value(6))
            c = R.nn.conv2d(b, pw)
            R.output(c)
        return c

    @R.function
    def main(x: R.Tensor((1, 144, 28, 28), "float32"), dw: R.Tensor((144, 1, 3, 3), "float32"),
             pw: R.Tensor((24, 144, 1, 1), "float32")):
        cls = DepthwisePointwiseOneKernel
        with R.dataflow():
            c = cls.fused_conv2d_tir_clip_conv2d1(x, dw, pw)
            R.output(c)
        return c


@I.ir_module
class DepthwisePointwiseTwoKernels:
    """RTX 3060: the tile costs too much occupancy; depthwise+ReLU6 in registers, pointwise apart."""

    @R.function(private=True)
    def fused_conv2d_tir_clip(
        x: R.Tensor((1, 144, 28, 28), "float32"), dw: R.Tensor((144, 1, 3, 3), "float32"),
    ) -> R.Tensor((1, 144, 28, 28), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.conv2d(x, dw, padding=[1, 1, 1, 1], groups=144)
            b = R.clip(a, R.prim_value(0), R.prim_value(6))
            R.output(b)
        return b

    @R.function
    def main(x: R.Tensor((1, 144, 28, 28), "float32"), dw: R.Tensor((144, 1, 3, 3), "float32"),
             pw: R.Tensor((24, 144, 1, 1), "float32")):
        cls = DepthwisePointwiseTwoKernels
        with R.dataflow():
            b = cls.fused_conv2d_tir_clip(x, dw)
            c = R.nn.conv2d(b, pw)
            R.output(c)
        return c


def test_depthwise_pointwise_one_kernel_on_h200_where_it_fits():
    """The template's plan fits the H200 (shared memory, registers, occupancy) ..."""
    tvm.ir.assert_structural_equal(fuse(DepthwisePointwise, "nvidia-h200", pair_cost=False),
                                   lower(DepthwisePointwiseOneKernel))


def test_depthwise_pointwise_two_kernels_on_h200_by_its_cost():
    """... but on the H200's roofline the two kernels apart are faster (fusion/pair_cost.py)."""
    fuse_pass = hw.fusion_pass("nvidia-h200", pair_templates=BOTH_PAIRS)
    tvm.ir.assert_structural_equal(fuse_pass(lower(DepthwisePointwise)), lower(DepthwisePointwiseTwoKernels))
    (decision,) = fuse_pass.report.find("complex-pair")
    assert not decision.fused and "< break-even" in decision.reason


def test_depthwise_pointwise_two_kernels_on_rtx_3060():
    tvm.ir.assert_structural_equal(
        fuse(DepthwisePointwise, "nvidia-rtx-3060"), lower(DepthwisePointwiseTwoKernels))


# ---- conv + inference batch_norm + ReLU: the TIR shows batch_norm element-wise --------------
@I.ir_module
class ConvBatchNormRelu:
    @R.function
    def main(x: R.Tensor((1, 16, 8, 8), "float32"), w: R.Tensor((16, 16, 3, 3), "float32"),
             g: R.Tensor((16,), "float32"), b: R.Tensor((16,), "float32"),
             m: R.Tensor((16,), "float32"), v: R.Tensor((16,), "float32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            bn = R.nn.batch_norm(a, g, b, m, v, axis=1, training=False)
            y = bn[0]
            z = R.nn.relu(y)
            R.output(z)
        return z


@I.ir_module
class ConvBatchNormReluOneKernel:
    @R.function(private=True)
    def fused_conv2d_batch_norm_relu(
        x: R.Tensor((1, 16, 8, 8), "float32"), w: R.Tensor((16, 16, 3, 3), "float32"),
        g: R.Tensor((16,), "float32"), b: R.Tensor((16,), "float32"),
        m: R.Tensor((16,), "float32"), v: R.Tensor((16,), "float32"),
    ) -> R.Tensor((1, 16, 8, 8), "float32"):
        R.func_attr({"Primitive": True})
        with R.dataflow():
            a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            bn = R.nn.batch_norm(a, g, b, m, v, axis=1, training=False)
            y = bn[0]
            z = R.nn.relu(y)
            R.output(z)
        return z

    @R.function
    def main(x: R.Tensor((1, 16, 8, 8), "float32"), w: R.Tensor((16, 16, 3, 3), "float32"),
             g: R.Tensor((16,), "float32"), b: R.Tensor((16,), "float32"),
             m: R.Tensor((16,), "float32"), v: R.Tensor((16,), "float32")):
        cls = ConvBatchNormReluOneKernel
        with R.dataflow():
            z = cls.fused_conv2d_batch_norm_relu(x, w, g, b, m, v)
            R.output(z)
        return z


def test_batch_norm_joins_the_conv_epilogue():
    """Stock FuseOps stops at batch_norm (annotated injective for its tuple output); the TIR
    shows it reads the conv output element for element, so it is an epilogue."""
    tvm.ir.assert_structural_equal(fuse(ConvBatchNormRelu, "nvidia-h200"), lower(ConvBatchNormReluOneKernel))


def test_injective_epilogues_knob_restores_stock_behaviour():
    """With the knob off, the grouping is stock FuseOps' own: the same module (batch_norm and ReLU
    one group, the conv alone), and after FuseTIR the same kernels as ``stock_groups``."""
    stock = relax.transform.FuseOps()(lower(ConvBatchNormRelu))
    after = fuse(ConvBatchNormRelu, "nvidia-h200", injective_epilogues=False)
    tvm.ir.assert_structural_equal(after, stock)
    assert not tvm_ffi.structural_equal(fuse(ConvBatchNormRelu, "nvidia-h200"), stock)  # the knob's default differs
    llvm = tvm.target.Target({"kind": "llvm"})
    ours = hw.fusion_pass("nvidia-h200", injective_epilogues=False)
    assert kernel_names(fused_module(ConvBatchNormRelu, llvm, ours)) == stock_groups(ConvBatchNormRelu, llvm) \
        == ["conv2d", "fused_batch_norm_relu"]
