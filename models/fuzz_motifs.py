"""Motifs of the fuzz graphs: short step sequences that real networks are made of.

Purely random steps seldom put a pool right after a conv's epilogue or a pointwise conv after a
depthwise one, yet those are the groups the plugin fuses and its templates schedule. A motif draws
such a sequence through the same chooser, one primitive step at a time (so a program stays a list
of primitive steps, and hypothesis can still shrink it step by step). Each motif is a generator:
it yields a step, the caller applies it, and the motif reads the new value (``graph.values[-1]``)
before drawing the next; a step that does not apply ends the motif.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, Tuple

from .fuzz_ops import propose_conv, propose_pool

ACTS = ("relu", "relu6", "silu", "gelu", "sigmoid", "none")


def _act(graph, ch, a):
    act = ch.pick(ACTS)
    if act == "none":
        return None
    if act == "relu6":
        return ["clip", [graph.vid(a)], {"min": 0.0, "max": 6.0}]
    return [act, [graph.vid(a)], {}]


def _epilogue(graph, ch) -> Iterator[list]:
    """[BatchNorm | per-channel bias], then an activation, on the newest value."""
    a = graph.values[-1]
    if ch.flip(0.6):
        yield ["batchnorm", [graph.vid(a)], {"eps": 1e-5}]
    elif ch.flip(0.5):
        yield ["add", [graph.vid(a)], {"other": "const", "shape": [a.shape[1]] + [1] * (a.rank - 2),
                                       "swap": False}]
    step = _act(graph, ch, graph.values[-1])
    if step is not None:
        yield step


def _rank4(graph, a):
    """``a`` if it is 4-D (NCHW), else the newest 4-D value, else None."""
    if a.rank == 4:
        return a
    return next((v for v in graph.pool() if v.rank == 4), None)


def _conv(graph, ch, a, **kw):
    proposal = propose_conv(graph, ch, a, **kw)
    return None if proposal is None else ["conv", *proposal]


def conv_block(graph, ch, a) -> Iterator[list]:
    """conv -> [bn | bias] -> act -> [max or average pool]: ConvPool's group."""
    a = _rank4(graph, a)
    if a is None:
        return
    step = _conv(graph, ch, a, kind=ch.pick(["dense", "dense", "grouped"]), kernels=(1, 3, 3, 5, 7),
                 mode=ch.pick(["same", "zero"]), square=ch.flip(0.8), stride=ch.pick([1, 1, 2]))
    if step is None:
        return
    yield step
    yield from _epilogue(graph, ch)
    if ch.flip(0.8):
        kernel, stride, mode = ch.pick([(2, 2, "zero"), (2, 2, "zero"), (3, 3, "zero"), (3, 2, "zero"),
                                        (3, 2, "same"), (2, 1, "zero"), (3, 1, "same")])
        proposal = propose_pool(graph, ch, graph.values[-1], kernels=(kernel,), stride=stride, mode=mode)
        if proposal is not None:
            yield ["pool", *proposal]


def dw_pw(graph, ch, a) -> Iterator[list]:
    """depthwise conv -> [bn] -> act -> pointwise conv -> [bn]: DepthwisePointwise's pair."""
    a = _rank4(graph, a)
    if a is None:
        return
    step = _conv(graph, ch, a, kind="depthwise", kernels=(3, 3, 5, 7), stride=ch.pick([1, 1, 2]),
                 mode="same", dilate=False, cout=a.shape[1] if ch.flip(0.8) else None,
                 square=ch.flip(0.8))
    if step is None:
        return
    yield step
    yield from _epilogue(graph, ch)
    step = _conv(graph, ch, graph.values[-1], kind="dense", kernels=(1,), stride=1, mode="zero")
    if step is None:
        return
    yield step
    if ch.flip(0.6):
        yield ["batchnorm", [len(graph.values) - 1], {"eps": 1e-5}]


def residual(graph, ch, a) -> Iterator[list]:
    """conv (same channels, same size) -> bn -> add the input back -> relu."""
    a = _rank4(graph, a)
    if a is None:
        return
    step = _conv(graph, ch, a, kind=ch.pick(["dense", "depthwise"]), kernels=(1, 3), stride=1,
                 mode="same", cout=a.shape[1], dilate=False, square=True)
    if step is None:
        return
    yield step
    yield ["batchnorm", [len(graph.values) - 1], {"eps": 1e-5}]
    yield ["add", [len(graph.values) - 1, graph.vid(a)], {"other": "value", "swap": ch.flip(0.5)}]
    yield ["relu", [len(graph.values) - 1], {}]


def squeeze_excite(graph, ch, a) -> Iterator[list]:
    """global average pool -> 1x1 conv -> relu -> 1x1 conv -> sigmoid -> scale the input."""
    a = _rank4(graph, a)
    if a is None:
        return
    yield ["global_pool", [graph.vid(a)], {"op": "GlobalAveragePool"}]
    squeezed = max(1, a.shape[1] // ch.pick([2, 4, 1]))
    for cout, act in ((squeezed, ch.pick(["relu", "silu"])), (a.shape[1], "sigmoid")):
        step = _conv(graph, ch, graph.values[-1], kind="dense", kernels=(1,), stride=1, mode="zero",
                     cout=cout)
        if step is None:
            return
        yield step
        yield [act, [len(graph.values) - 1], {}]
    yield ["mul", [graph.vid(a), len(graph.values) - 1], {"other": "value", "swap": ch.flip(0.5)}]


def mlp(graph, ch, a) -> Iterator[list]:
    """matmul -> + bias -> gelu -> matmul -> [+ the input]: a transformer's feed-forward block."""
    if a.rank < 2:
        return
    width = a.shape[-1]
    yield ["matmul", [graph.vid(a)], {"b": "weight", "n": ch.pick(graph.sizes)}]
    h = graph.values[-1]
    yield ["add", [graph.vid(h)], {"other": "const", "shape": [h.shape[-1]], "swap": False}]
    yield [ch.pick(["gelu", "relu", "silu"]), [len(graph.values) - 1], {}]
    yield ["matmul", [len(graph.values) - 1], {"b": "weight", "n": width}]
    if ch.flip(0.6):
        yield ["add", [len(graph.values) - 1, graph.vid(a)], {"other": "value", "swap": False}]
        if ch.flip(0.6):
            yield ["layernorm", [len(graph.values) - 1], {"axis": -1, "eps": 1e-5, "bias": True}]


def attention(graph, ch, a) -> Iterator[list]:
    """softmax(x x^T * scale) x: a self-attention head without projections."""
    if a.rank < 2:
        return
    yield ["matmul", [graph.vid(a)], {"b": "self_t"}]
    yield ["mul", [len(graph.values) - 1], {"other": "const", "shape": [], "swap": False}]
    yield ["softmax", [len(graph.values) - 1], {"axis": -1, "log": False}]
    yield ["matmul", [len(graph.values) - 1, graph.vid(a)], {"b": "value"}]


def channel_shuffle(graph, ch, a) -> Iterator[list]:
    """reshape to (N, g, C/g, H, W) -> swap g and C/g -> reshape back: ShuffleNet's shuffle."""
    a = _rank4(graph, a)
    if a is None:
        return
    n, c, h, w = a.shape
    groups = [g for g in range(2, c) if c % g == 0]
    if not groups:
        return
    g = ch.pick(groups)
    yield ["reshape", [graph.vid(a)], {"shape": [n, g, c // g, h, w]}]
    yield ["transpose", [len(graph.values) - 1], {"perm": [0, 2, 1, 3, 4]}]
    yield ["reshape", [len(graph.values) - 1], {"shape": [n, c, h, w]}]


def inception(graph, ch, a) -> Iterator[list]:
    """Two or three conv branches (1x1, 1xk then kx1, kxk) concatenated on channels."""
    a = _rank4(graph, a)
    if a is None:
        return
    branches = []
    for _ in range(ch.int(2, 3)):
        kernels = ch.pick([(1,), (3,), (5,)])
        step = _conv(graph, ch, a, kind="dense", kernels=kernels, stride=1, mode="same", dilate=False)
        if step is None:
            return
        if ch.flip(0.4):  # asymmetric: 1xk then kx1 (Inception v3)
            k = ch.pick([3, 5, 7])
            step[2].update(kernel=[1, k], pads=[0, k // 2, 0, k // 2])
        yield step
        yield ["relu", [len(graph.values) - 1], {}]
        branches.append(len(graph.values) - 1)
    yield ["concat", branches, {"axis": 1, "extra": []}]


#: name -> (motif, weight when drawing)
MOTIFS: Dict[str, Tuple[Callable, int]] = {
    "conv_block": (conv_block, 4), "dw_pw": (dw_pw, 3), "residual": (residual, 2),
    "squeeze_excite": (squeeze_excite, 1), "mlp": (mlp, 2), "attention": (attention, 1),
    "channel_shuffle": (channel_shuffle, 1), "inception": (inception, 1),
}
#: motif names, each repeated by its weight: what a chooser picks from
MOTIF_TABLE: Tuple[str, ...] = tuple(name for name, (_, w) in MOTIFS.items() for _ in range(w))
