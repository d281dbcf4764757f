"""Micro-graphs for the fusion cases of ``fusion-rules.md``.

Each is the smallest graph that shows one fusion decision. ``size`` is the per-sample shape (the
batch is prepended); the defaults are the rules file's shapes, which at batch 32 are large enough
to be bandwidth-bound on a GPU (tensors beyond its L2), while batch 1 still runs on a CPU in tests.
Extra live inputs ("skip", "gate", "residual") are graph inputs, not initializers, so that they
are read from DRAM like real activations and the files stay small.
"""

from __future__ import annotations

from typing import Sequence

import onnx

from .common import GraphBuilder

#: Default per-sample sizes (without the batch axis).
ELTWISE_SIZE = (64, 56, 56)
CONV_POOL_SIZE = (64, 112, 112)
DW_PW_SIZE = (144, 56, 56)
LN_SIZE = (128, 768)


def build_relu_add_mul(batch: int = 1, seed: int = 0,
                       size: Sequence[int] = ELTWISE_SIZE) -> onnx.ModelProto:
    """``(relu(input) + skip) * scale``: the rules' element-wise chain (< 1 FLOP/B).

    Parameters
    ----------
    batch : int
        Batch size; the inputs ``input`` and ``skip`` are ``[batch, *size]``.
    seed : int
        Seed of the per-channel ``scale`` (shape ``[C, 1, ..., 1]``, broadcast like a BN scale).
    size : sequence of int
        Per-sample shape, channels first.
    """
    g = GraphBuilder(seed)
    shape = [batch, *size]
    x, skip = g.input("input", shape), g.input("skip", shape)
    scale = g.uniform("scale", (size[0],) + (1,) * (len(size) - 1), 0.5, 1.5)
    y = g.mul(g.add(g.relu(x), skip), scale)
    return g.model(y, shape, "relu_add_mul", doc="ReLU + Add + Mul element-wise chain")


def build_eltwise5(batch: int = 1, seed: int = 0,
                   size: Sequence[int] = ELTWISE_SIZE) -> onnx.ModelProto:
    """Five element-wise ops on three live inputs: relu, add, sigmoid, mul, mul.

    ``s = relu(input) + skip; output = s * sigmoid(s) * gate``. ``s`` stays live across the
    sigmoid and ``gate`` is a third stream: the register-pressure case of the rules file.
    The graph has no weights; ``seed`` is accepted for a uniform signature.
    """
    del seed  # no initializers
    g = GraphBuilder(0)
    shape = [batch, *size]
    x, skip, gate = g.input("input", shape), g.input("skip", shape), g.input("gate", shape)
    s = g.add(g.relu(x), skip)
    y = g.mul(g.mul(s, g.op("Sigmoid", [s])), gate)
    return g.model(y, shape, "eltwise5", doc="relu, add, sigmoid, mul, mul on three inputs")


def build_conv_relu_pool(batch: int = 1, seed: int = 0, size: Sequence[int] = CONV_POOL_SIZE,
                         out_channels: int = 64) -> onnx.ModelProto:
    """Conv 3x3 (pad 1, bias) + ReLU + 2x2 max-pool stride 2: the conv-then-pool case.

    Parameters
    ----------
    batch : int
        Batch size; ``input`` is ``[batch, C, H, W]`` with ``(C, H, W) = size``.
    seed : int
        Weight seed.
    size : (int, int, int)
        Per-sample input shape (H and W even).
    out_channels : int
        Conv output channels.
    """
    c, h, w = size
    g = GraphBuilder(seed)
    x = g.input("input", [batch, c, h, w])
    # gain 1: the input is unit-variance data, not post-ReLU.
    y = g.maxpool(g.relu(g.conv(x, c, out_channels, 3, pad=1, bias=True, gain=1.0)), 2, 2)
    return g.model(y, [batch, out_channels, h // 2, w // 2], "conv_relu_pool",
                   doc="conv3x3 + bias + ReLU + maxpool 2x2/2")


def build_dw_pw(batch: int = 1, seed: int = 0, size: Sequence[int] = DW_PW_SIZE,
                out_channels: int = 24) -> onnx.ModelProto:
    """MobileNetV2 bottleneck tail: depthwise 3x3 + bias + BN + ReLU6, then pointwise 1x1 conv.

    The default is the 56x56 stage (144 = 24 x 6 hidden channels projected back to 24), the
    shape the rules file measures. The projection has a bias and no BN or activation (linear).
    """
    c, h, w = size
    g = GraphBuilder(seed, conv_bias=True)
    x = g.input("input", [batch, c, h, w])
    y = g.relu6(g.bn(g.conv(x, c, c, 3, group=c, gain=1.0), c))
    y = g.conv(y, c, out_channels, 1)
    return g.model(y, [batch, out_channels, h, w], "dw_pw",
                   doc="depthwise 3x3 + BN + ReLU6, pointwise 1x1")


def build_layernorm_residual(batch: int = 1, seed: int = 0,
                             size: Sequence[int] = LN_SIZE) -> onnx.ModelProto:
    """``LayerNorm(input + bias + residual)``: the Transformer sublayer tail (post-LN).

    ``input`` stands for a projection's MatMul output (its bias Add is part of the pattern) and
    ``residual`` for the sublayer's input; both ``[batch, seq, hidden]``.
    """
    seq, hidden = size
    g = GraphBuilder(seed)
    shape = [batch, seq, hidden]
    x, res = g.input("input", shape), g.input("residual", shape)
    bias = g.normal("bias", (hidden,), 0.02)
    y = g.layernorm(g.add(g.add(x, bias), res), hidden, eps=1e-12)
    return g.model(y, shape, "layernorm_residual", doc="bias Add + residual Add + LayerNorm")

