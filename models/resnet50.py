"""ResNet-50 (He et al., 2015, "Deep Residual Learning for Image Recognition"), v1.5.

Table 1 of the paper, 50-layer column: a 7x7 stride-2 stem of 64 channels, 3x3 stride-2 max-pool,
then four stages of bottleneck blocks ([3, 4, 6, 3] blocks; 1x1, 3x3, 1x1 convs of widths
64/128/256/512 and 4x expansion), global average pooling and a 1000-way fully-connected layer.

"v1.5" as in torchvision: a stage's stride-2 downsampling sits on the 3x3 conv of its first
block, not on the first 1x1 conv as in the paper (v1). The projection shortcut (option B of the
paper) is a strided 1x1 conv + BN, used only where the shape changes.
"""

from __future__ import annotations

import onnx

from .common import GraphBuilder

#: (bottleneck width, blocks, first stride) per stage; output channels are 4x the width.
STAGES = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
EXPANSION = 4


def bottleneck(g: GraphBuilder, x: str, cin: int, width: int, stride: int) -> str:
    """One bottleneck block: 1x1 reduce, 3x3 (carries the stride, v1.5), 1x1 expand, add, ReLU."""
    cout = width * EXPANSION
    y = g.relu(g.bn(g.conv(x, cin, width, 1), width))
    y = g.relu(g.bn(g.conv(y, width, width, 3, stride=stride), width))
    # Small BN scale on the last branch BN: 16 identity adds would otherwise double the variance
    # at every block (torchvision's zero_init_residual is the extreme of the same idea).
    y = g.bn(g.conv(y, width, cout, 1), cout, gamma=(0.2, 0.4))
    if stride != 1 or cin != cout:
        # Projection shortcut; its input is post-ReLU, so the He gain 2 keeps the variance.
        x = g.bn(g.conv(x, cin, cout, 1, stride=stride, pad=0, prefix="downsample"), cout)
    return g.relu(g.add(y, x))


def build_resnet50(batch: int = 1, seed: int = 0, num_classes: int = 1000,
                   conv_bias: bool = True) -> onnx.ModelProto:
    """Build ResNet-50 v1.5 as ONNX.

    Parameters
    ----------
    batch : int
        Batch size of the static input ``input`` of shape ``[batch, 3, 224, 224]``.
    seed : int
        Weight seed.
    num_classes : int
        Classifier width.
    conv_bias : bool
        Give convolutions a bias before their BatchNormalization (the paper's model has none:
        pass ``False`` for its exact parameter count, 25,557,032).

    Returns
    -------
    onnx.ModelProto
        Output ``output`` (logits) of shape ``[batch, num_classes]``.
    """
    g = GraphBuilder(seed, conv_bias=conv_bias)
    x = g.input("input", [batch, 3, 224, 224])
    # Stem; gain 1 because the image input is not post-ReLU.
    x = g.relu(g.bn(g.conv(x, 3, 64, 7, stride=2, pad=3, gain=1.0), 64))
    x = g.maxpool(x, 3, 2, pad=1)
    cin = 64
    for width, blocks, stride in STAGES:
        for i in range(blocks):
            x = bottleneck(g, x, cin, width, stride if i == 0 else 1)
            cin = width * EXPANSION
    logits = g.classifier(x, cin, num_classes)
    return g.model(logits, [batch, num_classes], "resnet50",
                   doc="ResNet-50 v1.5 (He et al. 2015; stride on the 3x3), seeded random weights")
