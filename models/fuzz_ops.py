"""The operators of the fuzz graphs, and how each step is drawn.

A *step* is ``[op, args, params]``: ``op`` names an entry of :data:`~.fuzz_nodes.OPS`, ``args``
are indices into the graph's values (its inputs first, then one value per step, in order) and
``params`` is a dict of plain JSON values. Drawing a step (``propose_<op>`` here) needs the shapes
of the values so far; applying it (``apply_<op>``, :mod:`.fuzz_nodes`) appends the ONNX nodes.
Output shapes are never computed from formulas: ONNX shape inference says them
(:class:`~.fuzz.FuzzGraph`), so nothing here can disagree with ONNX; the window arithmetic below
only steers the draws away from windows that do not fit.

Values stay finite by construction (NNSmith's concern): ``Exp`` only sees clipped inputs, every
denominator is at least 0.5 away from zero, weights keep activations O(1), and a step whose bound
estimate passes :data:`MAX_BOUND` is refused.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

#: Small, odd, prime and unit sizes: what breaks tilings and vector widths.
SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 24, 31, 32)
#: Sizes added for graphs that are only compiled (``large``): edge tiles of the templates' tilings.
LARGE_SIZES = SIZES + (33, 48, 56, 64, 65, 96, 112, 128)
KERNELS = (1, 3, 5, 7)
#: Most elements of any tensor, and most multiply-adds of a conv or matmul (an example runs in
#: about a second on llvm); the ``LARGE_`` limits for graphs that are only compiled.
MAX_ELEMS = 60_000
MAX_MACS = 3_000_000
LARGE_MAX_ELEMS = 1_000_000
LARGE_MAX_MACS = 500_000_000
#: Largest magnitude estimate a value may have.
MAX_BOUND = 1e4
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


class Value:
    """A float32 tensor of the graph: its ONNX name, static shape and magnitude estimate."""

    __slots__ = ("name", "shape", "bound", "is_input")

    def __init__(self, name: str, shape: Sequence[int], bound: float, is_input: bool = False):
        self.name, self.shape, self.bound, self.is_input = name, tuple(shape), float(bound), is_input

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def broadcast(*shapes: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """Numpy broadcast of ``shapes``, or None where they do not broadcast."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _prod(dims) -> int:
    return int(np.prod(list(dims), dtype=np.int64))


# ---------------------------------------------------------------------------------- proposing
# propose_<op>(graph, ch, a) -> (args, params) or None when the op does not apply to value a.
# ``graph`` is the FuzzGraph (values, value ids), ``ch`` a chooser (int, pick, flip).

UNARY = ("relu", "sigmoid", "tanh", "erf", "clip", "exp", "gelu", "silu")


def propose_unary(graph, ch, a, op):
    params = {}
    if op == "clip":
        lo, hi = ch.pick([(-1.0, 1.0), (0.0, 6.0), (-0.5, 2.0), (None, 0.5), (-0.25, None)])
        params = {"min": lo, "max": hi}
    elif op == "exp":
        params = {"clip": 3.0 if a.bound > 3.0 else (2.0 if ch.flip(0.2) else None)}
    return [graph.vid(a)], params


def _broadcast_shape(graph, ch, shape):
    """A shape that broadcasts against ``shape``: leading axes dropped, axes set to 1, unit axes
    of ``shape`` widened."""
    shape = list(shape)
    if shape and ch.flip(0.3):
        shape = shape[ch.int(0, len(shape)):]
    out = []
    for d in shape:
        if d != 1 and ch.flip(0.35):
            out.append(1)
        elif d == 1 and ch.flip(0.25):
            out.append(ch.pick(graph.sizes))
        else:
            out.append(d)
    return out


def propose_binary(graph, ch, a, op):
    kind = ch.pick(["const", "value", "input"])
    params: Dict[str, object] = {"other": kind}
    args = [graph.vid(a)]
    if kind == "value":
        cands = [v for v in graph.pool() if v is not a and broadcast(a.shape, v.shape) is not None
                 and _prod(broadcast(a.shape, v.shape)) <= graph.max_elems]
        if not cands:
            return None
        b = cands[ch.int(0, len(cands) - 1)]
        args.append(graph.vid(b))
        shape = b.shape
    else:
        shape = _broadcast_shape(graph, ch, a.shape)
        params["shape"] = shape
    if _prod(broadcast(a.shape, shape)) > graph.max_elems:
        return None
    if op == "div":
        params["den"] = "const" if kind == "const" else ch.pick(["sigmoid", "abs"])
    else:
        params["swap"] = ch.flip(0.5)
    return args, params


def _factor(n: int) -> List[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def propose_reshape(graph, ch, a):
    rank = ch.pick([1, 2, 3, 4, 2, 3])
    dims = [1] * rank
    for p in _factor(a.size):
        dims[ch.int(0, rank - 1)] *= p
    if ch.flip(0.3):
        dims[ch.int(0, rank - 1)] = -1
    for i in range(min(rank, a.rank)):  # 0 copies the input's dimension (allowzero = 0)
        if dims[i] == a.shape[i] and ch.flip(0.3):
            dims[i] = 0
    return [graph.vid(a)], {"shape": dims}


def propose_flatten(graph, ch, a):
    return [graph.vid(a)], {"axis": ch.int(0, a.rank)}


def propose_transpose(graph, ch, a):
    if a.rank < 2:
        return None
    perm = list(range(a.rank))
    for i in range(a.rank - 1, 0, -1):  # Fisher-Yates through the chooser
        j = ch.int(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    return [graph.vid(a)], {"perm": perm}


def propose_concat(graph, ch, a):
    if a.rank < 1:
        return None
    axis = ch.int(-a.rank, a.rank - 1)
    ax = axis % a.rank
    args = [graph.vid(a)]
    same = [v for v in graph.pool() if v.rank == a.rank
            and all(v.shape[i] == a.shape[i] for i in range(a.rank) if i != ax)]
    extra = []
    for _ in range(ch.int(1, 3)):
        kind = ch.pick(["value", "const", "input"])
        if kind == "value":
            args.append(graph.vid(same[ch.int(0, len(same) - 1)]))  # a itself is always there
        else:
            extra.append([kind, ch.pick(graph.sizes)])
    total = sum(graph.values[i].shape[ax] for i in args) + sum(n for _, n in extra)
    if a.size // a.shape[ax] * total > graph.max_elems:
        return None
    return args, {"axis": axis, "extra": extra}


def propose_slice(graph, ch, a):
    if a.rank < 1:
        return None
    axes = [ax for ax in range(a.rank) if ch.flip(0.5)] or [ch.int(0, a.rank - 1)]
    if ch.flip(0.3):
        axes = axes[::-1]
    starts, ends, steps = [], [], []
    for ax in axes:
        d = a.shape[ax]
        step = ch.pick([1, 1, 2, 3, -1, -2])
        start = ch.int(0, d - 1)
        if step > 0:
            end = ch.int(start + 1, d)
            if end == d and ch.flip(0.3):
                end = INT64_MAX
            elif ch.flip(0.2):
                end -= d  # the same index, counted from the end
        else:
            end = ch.int(-1, start - 1)  # -1: through index 0
            if end == -1:
                end = ch.pick([-d - 1, INT64_MIN])
            elif ch.flip(0.2):
                end -= d
        if ch.flip(0.2):
            start -= d
        starts.append(start)
        ends.append(end)
        steps.append(step)
    axes = [ax - a.rank if ch.flip(0.2) else ax for ax in axes]
    return [graph.vid(a)], {"starts": starts, "ends": ends, "axes": axes, "steps": steps}


def propose_reduce(graph, ch, a):
    if a.rank < 1:
        return None
    op = ch.pick(["ReduceMean", "ReduceSum", "ReduceMax"])
    axes = [ax for ax in range(a.rank) if ch.flip(0.4)]
    if not axes and not ch.flip(0.3):
        axes = [ch.int(0, a.rank - 1)]
    axes = [ax - a.rank if ch.flip(0.3) else ax for ax in axes]
    return [graph.vid(a)], {"op": op, "axes": axes or None, "keepdims": int(ch.flip(0.5))}


def _window(ch, d, kernels, dilate, pool, stride=None, mode=None):
    """One spatial axis of a conv or pool window: (kernel, stride, dilation, pad begin, pad end)."""
    k = ch.pick(kernels)
    dil = ch.pick([1, 1, 2]) if dilate else 1
    if dil * (k - 1) + 1 > d and ch.flip(0.7):
        k, dil = 1, 1
    eff = dil * (k - 1) + 1
    stride = ch.pick([1, 1, 2, 3]) if stride is None else stride
    mode = ch.pick(["same", "zero", "asym"]) if mode is None else mode
    limit = k - 1 if pool else eff - 1  # pooling pads must stay below the kernel
    if mode == "same":
        pb = pe = min((eff - 1) // 2, limit)
    elif mode == "zero":
        pb = pe = 0
    else:
        pb, pe = ch.int(0, limit), ch.int(0, limit)
    return k, stride, dil, pb, pe


def _out_dim(d, k, s, dil, pb, pe, ceil=False):
    span = d + pb + pe - (dil * (k - 1) + 1)
    if span < 0:
        return 0
    return (-(-span // s) if ceil else span // s) + 1


def propose_conv(graph, ch, a, kind=None, kernels=KERNELS, stride=None, mode=None, cout=None,
                 dilate=True, square=False):
    """A Conv on ``a`` (rank 3 or 4); ``kind`` ("dense", "depthwise", "grouped"), ``kernels``,
    ``stride``, ``mode`` (padding: "same", "zero", "asym"), ``cout`` and ``square`` (one window
    for every spatial axis) fix what motifs need."""
    if a.rank not in (3, 4):
        return None
    n, c = a.shape[:2]
    kind = ch.pick(["dense", "depthwise", "grouped", "dense"]) if kind is None else kind
    if kind == "depthwise" and c > 1:
        group = c
    elif kind == "grouped":
        group = ch.pick([g for g in range(1, c + 1) if c % g == 0])
    else:
        group = 1
    if cout is None:
        cout = ch.pick(graph.sizes) if group == 1 else group * ch.pick([1, 1, 2, 3])
    if square:
        wins = [_window(ch, min(a.shape[2:]), kernels, dilate and ch.flip(0.3), False, stride, mode)] * (a.rank - 2)
    else:
        wins = [_window(ch, d, kernels, dilate and ch.flip(0.5), False, stride, mode) for d in a.shape[2:]]
    params = {"cout": cout, "group": group, "kernel": [w[0] for w in wins],
              "strides": [w[1] for w in wins], "dilations": [w[2] for w in wins],
              "pads": [w[3] for w in wins] + [w[4] for w in wins], "bias": ch.flip(0.6)}
    out = [_out_dim(d, *w) for d, w in zip(a.shape[2:], wins)]
    if mode is None and ch.flip(0.15):
        params["auto_pad"] = ch.pick(["SAME_UPPER", "SAME_LOWER", "VALID"])
        del params["pads"]
        out = [-(-d // w[1]) if params["auto_pad"] != "VALID" else _out_dim(d, w[0], w[1], w[2], 0, 0)
               for d, w in zip(a.shape[2:], wins)]
    if min(out) < 1 or n * cout * _prod(out) > graph.max_elems:
        return None
    if n * cout * _prod(out) * (c // group) * _prod(params["kernel"]) > graph.max_macs:
        return None
    return [graph.vid(a)], params


def propose_pool(graph, ch, a, kernels=(1, 2, 3, 4), stride=None, mode=None):
    if a.rank not in (3, 4):
        return None
    op = ch.pick(["MaxPool", "AveragePool", "MaxPool"])
    dilate = op == "MaxPool" and mode is None and ch.flip(0.2)
    wins = [_window(ch, d, kernels, dilate, True, stride, mode) for d in a.shape[2:]]
    params = {"op": op, "kernel": [w[0] for w in wins], "strides": [w[1] for w in wins],
              "pads": [w[3] for w in wins] + [w[4] for w in wins], "ceil_mode": int(ch.flip(0.3))}
    if op == "MaxPool":
        params["dilations"] = [w[2] for w in wins]
    else:
        params["count_include_pad"] = int(ch.flip(0.5))
    out = [_out_dim(d, *w, ceil=bool(params["ceil_mode"])) for d, w in zip(a.shape[2:], wins)]
    # a last ceil-mode window that starts in the right padding: ONNX's shape inference counts it,
    # TVM (and PyTorch) drop it; not what this fuzzer tests
    if params["ceil_mode"] and any((o - 1) * w[1] >= d + w[3] for o, d, w in zip(out, a.shape[2:], wins)):
        params["ceil_mode"] = 0
        out = [_out_dim(d, *w) for d, w in zip(a.shape[2:], wins)]
    if min(out) < 1:
        return None
    return [graph.vid(a)], params


def propose_global_pool(graph, ch, a):
    if a.rank < 3:
        return None
    return [graph.vid(a)], {"op": ch.pick(["GlobalAveragePool", "GlobalMaxPool"])}


def propose_matmul(graph, ch, a):
    if a.rank < 1:
        return None
    k = a.shape[-1]
    batch = a.shape[:-2]
    m = a.shape[-2] if a.rank >= 2 else 1
    kind = ch.pick(["weight", "value", "self_t", "input", "weight"] if a.rank >= 2 else ["weight"])
    args, params = [graph.vid(a)], {"b": kind}
    if kind == "weight":
        n = ch.pick(graph.sizes)
        if ch.flip(0.1):
            n = 0  # a 1-D weight: the last axis goes away
        params["n"] = n
        out = (*batch, m, max(n, 1))
    elif kind == "value":
        cands = [v for v in graph.pool() if v.rank >= 2 and v.shape[-2] == k
                 and broadcast(batch, v.shape[:-2]) is not None]
        if not cands:
            return None
        b = cands[ch.int(0, len(cands) - 1)]
        args.append(graph.vid(b))
        out = (*broadcast(batch, b.shape[:-2]), m, b.shape[-1])
    elif kind == "self_t":
        out = (*batch, m, m)
    else:
        bshape = [*_broadcast_shape(graph, ch, batch), k, ch.pick(graph.sizes)]
        params["shape"] = bshape
        out = (*broadcast(batch, bshape[:-2]), m, bshape[-1])
    if _prod(out) > graph.max_elems or _prod(out) * k > graph.max_macs:
        return None
    return args, params


def propose_gemm(graph, ch, a):
    if a.rank < 1:
        return None
    rows, cols = (a.shape if a.rank == 2 else (_prod(a.shape[:1]), _prod(a.shape[1:])))
    trans_a, trans_b = int(ch.flip(0.3)), int(ch.flip(0.5))
    m, k = (cols, rows) if trans_a else (rows, cols)
    n = ch.pick(graph.sizes)
    params = {"n": n, "transA": trans_a, "transB": trans_b, "b": ch.pick(["const", "const", "input"]),
              "alpha": ch.pick([1.0, 0.5, 2.0]), "beta": ch.pick([1.0, 0.5]),
              "c": ch.pick(["n", "none", "1n", "mn", "m1", "scalar", "one"])}
    if m * n > graph.max_elems or m * n * k > graph.max_macs:
        return None
    return [graph.vid(a)], params


def propose_softmax(graph, ch, a):
    if a.rank < 1:
        return None
    return [graph.vid(a)], {"axis": ch.int(-a.rank, a.rank - 1), "log": ch.flip(0.2)}


def propose_layernorm(graph, ch, a):
    if a.rank < 1:
        return None
    axis = -1 if ch.flip(0.5) else ch.int(-a.rank, a.rank - 1)
    return [graph.vid(a)], {"axis": axis, "eps": ch.pick([1e-5, 1e-12, 1e-3]), "bias": ch.flip(0.7)}


def propose_batchnorm(graph, ch, a):
    if a.rank < 2:
        return None
    return [graph.vid(a)], {"eps": ch.pick([1e-5, 1e-3])}
