"""MobileNetV2 (Sandler et al., 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks").

Width multiplier 1.0, 224x224 input, 1000 classes; layer table as in Table 2 of the paper
(and torchvision's ``mobilenet_v2``): a 3x3 stride-2 stem of 32 channels, 17 inverted-residual
bottlenecks, a 1x1 conv to 1280 channels, global average pooling and a linear classifier.
Dropout is an identity in eval mode and is left out.
"""

from __future__ import annotations

import onnx

from .common import GraphBuilder

#: (expansion t, output channels c, repeats n, first stride s), Table 2 of the paper.
INVERTED_RESIDUAL_SETTING = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]
STEM_CHANNELS = 32
LAST_CHANNELS = 1280


def inverted_residual(g: GraphBuilder, x: str, cin: int, cout: int, stride: int,
                      expand: int) -> str:
    """One bottleneck: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear projection.

    The shortcut is used only when stride is 1 and the channel count is unchanged (paper, Fig. 4).
    """
    hidden = cin * expand
    residual = stride == 1 and cin == cout
    y = x
    if expand != 1:  # the t=1 block has no expansion conv (torchvision does the same)
        y = g.relu6(g.bn(g.conv(y, cin, hidden, 1), hidden))
    y = g.relu6(g.bn(g.conv(y, hidden, hidden, 3, stride=stride, group=hidden), hidden))
    # Linear bottleneck: no activation after the projection. Where a shortcut follows, a small
    # BN scale keeps the variance of (shortcut + branch) from growing block after block.
    y = g.bn(g.conv(y, hidden, cout, 1), cout, gamma=(0.2, 0.4) if residual else (0.8, 1.2))
    return g.add(x, y) if residual else y


def build_mobilenet_v2(batch: int = 1, seed: int = 0, num_classes: int = 1000,
                       conv_bias: bool = True) -> onnx.ModelProto:
    """Build MobileNetV2 1.0 as ONNX.

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
        pass ``False`` for its exact parameter count, 3,504,872).

    Returns
    -------
    onnx.ModelProto
        Output ``output`` (logits) of shape ``[batch, num_classes]``.
    """
    g = GraphBuilder(seed, conv_bias=conv_bias)
    x = g.input("input", [batch, 3, 224, 224])
    # Stem: the network input is not post-ReLU, so gain 1 keeps its unit variance.
    x = g.relu6(g.bn(g.conv(x, 3, STEM_CHANNELS, 3, stride=2, gain=1.0), STEM_CHANNELS))
    cin = STEM_CHANNELS
    for t, c, n, s in INVERTED_RESIDUAL_SETTING:
        for i in range(n):
            x = inverted_residual(g, x, cin, c, s if i == 0 else 1, t)
            cin = c
    x = g.relu6(g.bn(g.conv(x, cin, LAST_CHANNELS, 1), LAST_CHANNELS))
    logits = g.classifier(x, LAST_CHANNELS, num_classes)
    return g.model(logits, [batch, num_classes], "mobilenet_v2",
                   doc="MobileNetV2 1.0 (Sandler et al. 2018), seeded random weights")
