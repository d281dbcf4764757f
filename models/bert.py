"""One BERT-base encoder layer (Devlin et al., 2019; Vaswani et al., 2017 for the layer itself).

Hidden size 768, 12 heads of 64, feed-forward 3072 with GELU in its exact (erf) form, post-LN
residual blocks with LayerNorm epsilon 1e-12, sequence length 128. Node for node this is what
``torch.onnx.export`` makes of Hugging Face's ``BertLayer`` in eval mode (dropout left out)::

    q, k, v = x Wq + bq, x Wk + bk, x Wv + bv       # MatMul + Add each
    heads   = reshape [B, S, 12, 64] -> transpose [B, 12, S, 64]
    p       = softmax(q k^T / sqrt(64))             # no attention mask (see below)
    h1      = LayerNorm((p v merged) Wo + bo + x)
    y       = LayerNorm(GELU(h1 W1 + b1) W2 + b2 + h1)

The input is the float hidden states ``[batch, 128, 768]`` (no embedding lookup). The attention
mask is omitted: with every position valid it only adds zeros to the scores.
"""

from __future__ import annotations

import numpy as np
import onnx

from .common import GraphBuilder

HIDDEN = 768
HEADS = 12
HEAD_DIM = HIDDEN // HEADS
FFN = 3072
SEQ = 128
LN_EPS = 1e-12


def gelu_erf(g: GraphBuilder, x: str) -> str:
    """GELU as ``x * 0.5 * (1 + erf(x / sqrt(2)))``: the Div/Erf/Add/Mul/Mul an export yields."""
    e = g.op("Erf", [g.op("Div", [x, g.shared_const("gelu.sqrt2", np.sqrt(2.0))])])
    return g.mul(g.mul(x, g.add(e, g.shared_const("gelu.one", 1.0))),
                 g.shared_const("gelu.half", 0.5))


def build_bert_encoder_layer(batch: int = 1, seed: int = 0, seq: int = SEQ) -> onnx.ModelProto:
    """Build one BERT-base encoder layer as ONNX.

    Parameters
    ----------
    batch : int
        Batch size of the input ``input`` of shape ``[batch, seq, 768]``.
    seed : int
        Weight seed. Linear weights are LeCun-normal (std 1/sqrt(fan_in)) rather than BERT's
        0.02, so the attention scores have unit scale and the softmax is not near-uniform.
    seq : int
        Sequence length (BERT's 128 by default).

    Returns
    -------
    onnx.ModelProto
        Output ``output`` of shape ``[batch, seq, 768]``.
    """
    g = GraphBuilder(seed)
    x = g.input("input", [batch, seq, HIDDEN])
    # Static target shapes (the model is built for one batch size): plain Reshape constants.
    split = g.const("shape.split_heads", np.array([batch, seq, HEADS, HEAD_DIM]), np.int64)
    merge = g.const("shape.merge_heads", np.array([batch, seq, HIDDEN]), np.int64)
    g.const("attention.scale", np.array(np.sqrt(HEAD_DIM)))

    def heads(t: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [t, split])], perm=perm)

    q = heads(g.linear(x, HIDDEN, HIDDEN, prefix="query"), [0, 2, 1, 3])
    k = heads(g.linear(x, HIDDEN, HIDDEN, prefix="key"), [0, 2, 3, 1])  # k^T directly
    v = heads(g.linear(x, HIDDEN, HIDDEN, prefix="value"), [0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), "attention.scale"])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, merge])
    h1 = g.layernorm(g.add(g.linear(ctx, HIDDEN, HIDDEN, prefix="attention.output"), x),
                     HIDDEN, LN_EPS)
    inter = gelu_erf(g, g.linear(h1, HIDDEN, FFN, prefix="intermediate"))
    y = g.layernorm(g.add(g.linear(inter, FFN, HIDDEN, prefix="ffn.output"), h1), HIDDEN, LN_EPS)
    return g.model(y, [batch, seq, HIDDEN], "bert_encoder_layer",
                   doc="BERT-base encoder layer (post-LN, erf GELU, no mask), seeded weights")
