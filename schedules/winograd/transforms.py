"""Winograd F(m x m, 3 x 3): the transforms of a 3x3, stride-1 convolution, as TE computes.

A convolution's output tile of ``m x m`` pixels is ``A^T [(G g G^T) * (B^T d B)] A`` over the
``alpha x alpha`` input tile ``d`` (``alpha = m + 2``) that covers it and the 3x3 filter ``g``: the
multiply is element-wise, so over the input channels it is ``alpha^2`` independent GEMMs, one per
position of the transformed tile, of ``alpha^2 / (9 m^2)`` the direct convolution's FLOPs (0.25
for F(4x4, 3x3), 0.44 for F(2x2, 3x3)). The matrices are Lavin and Gray's ("Fast Algorithms for
Convolutional Neural Networks", CVPR 2016, interpolation points 0, +-1, +-2 and infinity):
their ``B^T`` and ``A^T`` are sparse and small integers, so the transforms cost few FMAs.

Layouts (``s = eps * alpha + nu`` a position of the transformed tile, ``p`` a tile of the output,
image-major then tile rows then tile columns):

* filter ``U[s, k, c]`` (:func:`filter_transform`, numpy for a constant filter),
* data ``V[s, c, p]`` (:func:`data_transform`),
* the GEMMs ``M[s, k, p] = sum_c U[s, k, c] V[s, c, p]`` (a batched matmul, the GEMM template's),
* output ``Y[n, k, h, w]`` (:func:`output_transform`), in the convolution's own layout.

The transforms are separable: each is two passes, a sum over one side of the tile each (``B^T d``,
then ``(B^T d) B``), ``2 alpha`` terms an output instead of ``alpha^2`` (the unrolled kernel is a
third of the size, which TVM's lowering and nvcc pass over). Each output's sum is written out over
the matrix's non-zero columns (:func:`_combination`); its coefficients are constants once the
schedule unrolls the tile (``Select`` chains over the position, folded by TVM's simplifier, zero
terms dropped). The blocks carry ``schedule_rule`` annotations (TVM's own convention, as its topi
Winograd computes) that :mod:`.rule` schedules.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction as F
from typing import Tuple

import numpy as np
from tvm import te, tirx

#: Block annotation values the schedule rule (:mod:`.rule`) looks for.
FILTER_RULE = "winograd_filter"
DATA_RULE = "winograd_data"
OUTPUT_RULE = "winograd_output"
#: The data transform's padded input, and each transform's first pass (a separable transform's
#: half: ``2 alpha`` terms an output instead of ``alpha^2``), as the rule finds them by name.
DATA_PAD = "winograd_pad"
FILTER_ROWS = "winograd_filter_rows"
DATA_ROWS = "winograd_data_rows"
OUTPUT_COLUMNS = "winograd_output_columns"

# Lavin and Gray 2016, F(2x2, 3x3) and F(4x4, 3x3): (B^T, G, A^T), exact.
_MATRICES = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [F(1, 2), F(1, 2), F(1, 2)], [F(1, 2), F(-1, 2), F(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[F(1, 4), 0, 0], [F(-1, 6), F(-1, 6), F(-1, 6)], [F(-1, 6), F(1, 6), F(-1, 6)],
         [F(1, 24), F(1, 12), F(1, 6)], [F(1, 24), F(-1, 12), F(1, 6)], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}
TILE_SIZES = tuple(sorted(_MATRICES))


def matrices(m: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(B^T, G, A^T)`` of F(m x m, 3 x 3) as float64 arrays."""
    if m not in _MATRICES:
        raise ValueError(f"Winograd output tile {m} not supported; use one of {TILE_SIZES}")
    return tuple(np.array([[float(v) for v in row] for row in mat]) for mat in _MATRICES[m])


@dataclasses.dataclass(frozen=True)
class WinogradShape:
    """A 3x3 stride-1 convolution cut into ``m x m`` output tiles."""

    batch: int
    in_channels: int
    out_channels: int
    height: int  # input
    width: int
    pad: Tuple[int, int, int, int]  # top, left, bottom, right
    m: int

    @property
    def alpha(self) -> int:
        return self.m + 2

    @property
    def out_height(self) -> int:
        return self.height + self.pad[0] + self.pad[2] - 2

    @property
    def out_width(self) -> int:
        return self.width + self.pad[1] + self.pad[3] - 2

    @property
    def tiles_h(self) -> int:
        return -(-self.out_height // self.m)

    @property
    def tiles_w(self) -> int:
        return -(-self.out_width // self.m)

    @property
    def tiles(self) -> int:
        """P: output tiles over the batch."""
        return self.batch * self.tiles_h * self.tiles_w

    def direct_flops(self) -> int:
        return 2 * self.batch * self.out_channels * self.out_height * self.out_width * self.in_channels * 9

    def gemm_flops(self) -> int:
        return 2 * self.alpha ** 2 * self.out_channels * self.in_channels * self.tiles

    def transformed_bytes(self, dtype_bytes: int = 4) -> int:
        """``V`` and ``M``, the two tensors Winograd adds, each written once and read once."""
        return 2 * dtype_bytes * self.alpha ** 2 * self.tiles * (self.in_channels + self.out_channels)


def filter_transform_numpy(weight: np.ndarray, m: int) -> np.ndarray:
    """``U[s, k, c] = (G g[k, c] G^T)[eps, nu]`` of an OIHW 3x3 filter (float64 math)."""
    _, g, _ = matrices(m)
    u = np.einsum("ea,kcab,nb->enkc", g, weight.astype(np.float64), g)
    alpha = m + 2
    return u.reshape(alpha * alpha, *weight.shape[:2]).astype(weight.dtype)


def filter_transform(weight: te.Tensor, m: int) -> te.Tensor:
    """:func:`filter_transform_numpy` as a TE compute, for a filter that is not a constant (a
    parameter: ``relax.transform.LiftTransformParams`` moves it out of the inference when it runs
    after this rewrite), in two passes: ``G g`` (:data:`FILTER_ROWS`), then ``(G g) G^T``."""
    _, g, _ = matrices(m)
    alpha = m + 2
    out_ch, in_ch = weight.shape[0], weight.shape[1]
    half = te.compute(  # (G g)[eps, b]
        (alpha, 3, out_ch, in_ch),
        lambda eps, b, k, c: _combination(g, eps, lambda kh: weight[k, c, kh, b]),
        name=FILTER_ROWS)
    return te.compute(
        (alpha * alpha, out_ch, in_ch),
        lambda s, k, c: _combination(g, s % alpha, lambda kw: half[s // alpha, kw, k, c]),
        name="winograd_filter", attrs={"schedule_rule": FILTER_RULE})


def data_transform(data: te.Tensor, shape: WinogradShape) -> te.Tensor:
    """``V[s, c, p] = (B^T d B)[eps, nu]`` over the input tile of every output tile ``p``, in two
    passes: the tile's columns (``B^T d``, :data:`DATA_ROWS`), then its rows."""
    bt, _, _ = matrices(shape.m)
    m, alpha = shape.m, shape.alpha
    top, left = shape.pad[0], shape.pad[1]
    height, width = shape.height, shape.width
    # padded so that every tile's window is inside it (the last tiles may overhang the output)
    rows, cols = shape.tiles_h * m + 2, shape.tiles_w * m + 2
    padded = te.compute(
        (shape.batch, shape.in_channels, rows, cols),
        lambda n, c, y, x: tirx.if_then_else(
            tirx.all(y >= top, y < top + height, x >= left, x < left + width),
            data[n, c, y - top, x - left], tirx.const(0, data.dtype)),
        name=DATA_PAD)
    per_image = shape.tiles_h * shape.tiles_w
    half = te.compute(  # (B^T d)[eps, b]
        (alpha, alpha, shape.in_channels, shape.tiles),
        lambda eps, b, c, p: _combination(bt, eps, lambda ra: padded[
            p // per_image, c, (p % per_image) // shape.tiles_w * m + ra, p % shape.tiles_w * m + b]),
        name=DATA_ROWS)
    return te.compute(
        (alpha * alpha, shape.in_channels, shape.tiles),
        lambda s, c, p: _combination(bt, s % alpha, lambda rb: half[s // alpha, rb, c, p]),
        name="winograd_data", attrs={"schedule_rule": DATA_RULE})


def output_transform(gemm: te.Tensor, shape: WinogradShape) -> te.Tensor:
    """``Y[n, k, h, w] = (A^T M A)[h mod m, w mod m]`` of the GEMMs' tile that holds pixel ``(h, w)``,
    in two passes: ``M A`` (:data:`OUTPUT_COLUMNS`), then ``A^T`` of it."""
    _, _, at = matrices(shape.m)
    m, alpha = shape.m, shape.alpha
    per_image = shape.tiles_h * shape.tiles_w
    half = te.compute(  # (M A)[a, j]
        (alpha, m, shape.out_channels, shape.tiles),
        lambda a, j, k, p: _combination(at, j, lambda rb: gemm[a * alpha + rb, k, p]),
        name=OUTPUT_COLUMNS)
    return te.compute(
        (shape.batch, shape.out_channels, shape.out_height, shape.out_width),
        lambda n, k, h, w: _combination(
            at, h % m, lambda ra: half[ra, w % m, k, n * per_image + h // m * shape.tiles_w + w // m]),
        name="winograd_output", attrs={"schedule_rule": OUTPUT_RULE})


def _combination(matrix: np.ndarray, row, term) -> tirx.PrimExpr:
    """``sum_j matrix[row, j] * term(j)`` for an index expression ``row``, written out over the
    columns ``j`` with a non-zero entry, each coefficient a ``Select`` chain over that column's
    non-zero entries (a constant once the schedule unrolls ``row``; TVM's simplifier then drops the
    zero terms).

    Written out rather than as a reduction over ``j`` whose coefficient selects over ``(row, j)``:
    the simplifier visits every level of a chain under the constraints of the levels above, and that
    form, ``alpha`` terms with a chain as long as the matrix has non-zero entries, made each
    transform's lowering about twice as long (TVM lowers every kernel twice: the guard's check and
    the module's build)."""
    total = None
    for j in range(matrix.shape[1]):
        rows = [i for i in range(matrix.shape[0]) if matrix[i, j] != 0]
        if not rows:
            continue
        value = term(j)
        coefficient = tirx.const(0, value.dtype)
        for i in rows:
            coefficient = tirx.Select(row == i, tirx.const(matrix[i, j], value.dtype), coefficient)
        total = value * coefficient if total is None else total + value * coefficient
    return total
