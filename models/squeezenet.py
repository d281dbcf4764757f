"""SqueezeNet v1.1 (Iandola et al., 2016; v1.1 as released in the DeepScale/SqueezeNet repo).

v1.1 differs from v1.0 in the stem (64 3x3 stride-2 filters instead of 96 7x7) and moves the
max-pools earlier (after conv1, fire3 and fire5): 2.4x less computation, same accuracy.
Layer list (``SqueezeNet_v1.1/train_val.prototxt``, torchvision ``squeezenet1_1``)::

    conv1 3x3/2 64, ReLU, maxpool 3/2
    fire2 (16, 64, 64), fire3 (16, 64, 64), maxpool 3/2
    fire4 (32, 128, 128), fire5 (32, 128, 128), maxpool 3/2
    fire6 (48, 192, 192), fire7 (48, 192, 192), fire8 (64, 256, 256), fire9 (64, 256, 256)
    dropout 0.5, conv10 1x1 1000, ReLU, global average pool

The original has no BatchNormalization and its classifier is conv10 (no fully-connected layer);
both are kept as released. Dropout is an identity in eval mode and is left out. Caffe pools round
the output size up, hence ``ceil_mode=1`` (at 224x224 it gives the same sizes as rounding down).
"""

from __future__ import annotations

import onnx

from .common import GraphBuilder

#: (squeeze, expand1x1, expand3x3) for fire2..fire9; "pool" marks a 3x3 stride-2 max-pool.
FIRE_LAYOUT = [
    (16, 64, 64), (16, 64, 64), "pool",
    (32, 128, 128), (32, 128, 128), "pool",
    (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256),
]


def fire(g: GraphBuilder, x: str, cin: int, squeeze: int, e1: int, e3: int) -> str:
    """Fire module: 1x1 squeeze + ReLU, then 1x1 and 3x3 expands (+ ReLU) concatenated."""
    s = g.relu(g.conv(x, cin, squeeze, 1, bias=True, prefix="squeeze"))
    a = g.relu(g.conv(s, squeeze, e1, 1, bias=True, prefix="expand1x1"))
    b = g.relu(g.conv(s, squeeze, e3, 3, pad=1, bias=True, prefix="expand3x3"))
    return g.op("Concat", [a, b], axis=1)


def build_squeezenet1_1(batch: int = 1, seed: int = 0, num_classes: int = 1000) -> onnx.ModelProto:
    """Build SqueezeNet v1.1 as ONNX.

    Parameters
    ----------
    batch : int
        Batch size of the static input ``input`` of shape ``[batch, 3, 224, 224]``.
    seed : int
        Weight seed.
    num_classes : int
        Output width of conv10.

    Returns
    -------
    onnx.ModelProto
        Output ``output`` of shape ``[batch, num_classes]`` (post-ReLU class scores, as released).
    """
    g = GraphBuilder(seed)
    x = g.input("input", [batch, 3, 224, 224])
    # Convs carry their bias (no BN in this net); gain 1 on the stem as its input is not post-ReLU.
    x = g.relu(g.conv(x, 3, 64, 3, stride=2, pad=0, bias=True, gain=1.0))
    x = g.maxpool(x, 3, 2, ceil_mode=1)
    cin = 64
    for layer in FIRE_LAYOUT:
        if layer == "pool":
            x = g.maxpool(x, 3, 2, ceil_mode=1)
        else:
            x = fire(g, x, cin, *layer)
            cin = layer[1] + layer[2]
    x = g.relu(g.conv(x, cin, num_classes, 1, bias=True, prefix="conv10"))
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    return g.model(x, [batch, num_classes], "squeezenet1_1",
                   doc="SqueezeNet v1.1 (Iandola et al. 2016), seeded random weights")
