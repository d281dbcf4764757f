"""A schedule rule for the Winograd transforms (:mod:`.transforms`): a thread per tile, the tile unrolled.

Both transforms are, per output tile and channel, a small dense-constant matrix product over an
``alpha x alpha`` tile: dlight would give each output element a thread of its own, each summing
terms whose coefficients are ``Select`` chains. Here a thread owns one tile of one channel:

* filter transform (``U[s, k, c]``, where the filter is a parameter, not a constant): as the data
  transform, a thread per output and input channel;
* data transform (``V[s, c, p]``): the thread loads its input tile (padding included) into
  registers once, computes both passes of the separable transform in registers, and stores the
  ``alpha^2`` outputs; threads run along ``p`` (consecutive tiles), so each store is coalesced;
* output transform (``Y[n, k, h, w]`` and the convolution's fused epilogue): the thread loads the
  ``alpha^2`` GEMM outputs of its tile (consecutive threads, consecutive tiles: coalesced), computes
  both passes in registers and its ``m x m`` pixels, the epilogue (bias, batch norm, activation,
  residual) applied before the store. Where the tiles cover the output exactly, each row of ``m`` pixels is stored
  (and a residual read) as one vector: scalar stores of a row are ``m`` floats apart across a
  warp, so each touches ``m`` times the sectors it fills.

Every loop inside a thread is unrolled, so each coefficient is a constant and TVM's simplifier
drops the zero terms (Lavin's matrices are sparse). Matched by the ``schedule_rule`` annotation
the transforms' blocks carry, on static shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import auto_inline_consumer_chain

from tvm_fusion_hw.schedules.base.limits import GPULimits
from tvm_fusion_hw.schedules.base.rule import TiledScheduleRule
from tvm_fusion_hw.schedules.base.tir_match import const_int

from .transforms import DATA_PAD, DATA_ROWS, DATA_RULE, FILTER_ROWS, FILTER_RULE, OUTPUT_COLUMNS, OUTPUT_RULE

SBlockRV = s_tir.schedule.SBlockRV


@dataclasses.dataclass
class WinogradConfig:
    """Search bounds.

    Attributes
    ----------
    threads : int
        Threads per block (a tile of one channel each).
    max_attempts : int
        Tiles tried (the output transform's vector stores, then scalar ones).
    """

    threads: int = 128
    max_attempts: int = 2


@dataclasses.dataclass(frozen=True)
class WinogradProblem:
    """Which transform, and over how many (tile, channel) pairs a thread each."""

    transform: str  # DATA_RULE or OUTPUT_RULE
    work: int  # threads the grid needs
    tile: int  # m: output pixels along each side of a tile (the output transform's split)
    exact: bool = False  # the output transform's tiles cover its output without overhang


@dataclasses.dataclass(frozen=True)
class WinogradTile:
    """The launch: threads per block and blocks; no shared memory."""

    threads: int
    blocks: int
    shared_bytes: int = 0
    vector_stores: bool = False  # the output transform stores a row of its tile as one vector

    def summary(self) -> str:
        rows = ", rows stored as vectors" if self.vector_stores else ""
        return f"a thread per tile and channel (filter: per channel pair){rows}, {self.threads} threads a block, " \
               f"{self.blocks} blocks"


class WinogradTransform(TiledScheduleRule):
    """The data and output transforms of a Winograd convolution (see the module docstring);
    None for every other PrimFunc."""

    Config = WinogradConfig
    stages_in_shared = False  # each thread's tile stays in registers

    @staticmethod
    def match(sch, config, limits):  # pylint: disable=unused-argument
        """``(problem, anchor)``: the annotated transform block, producers other than the padding
        inlined into it (data) or the epilogue into its write-back (output, at schedule time)."""
        return _match(sch)

    @staticmethod
    def rank(problem, limits: GPULimits, config):
        threads = min(config.threads, limits.profile.max_threads_per_block)
        scalar = WinogradTile(threads, -(-problem.work // threads))
        return [dataclasses.replace(scalar, vector_stores=True), scalar] if problem.exact else [scalar]

    @staticmethod
    def schedule(sch, problem, tile, *blocks):
        if problem.transform in (DATA_RULE, FILTER_RULE):
            _schedule_tiles(sch, tile, *blocks)
        else:
            _schedule_output(sch, problem, tile, *blocks)


def _match(sch: s_tir.Schedule) -> Optional[Tuple]:
    if any(const_int(d) is None for p in sch.mod["main"].params if hasattr(p.ty, "shape") for d in p.ty.shape):
        return None
    try:
        root = get_root_block(sch)
    except Exception:  # pylint: disable=broad-except
        return None
    blocks = sch.get_child_blocks(root)
    rules = [str(sch.get(b).annotations.get("schedule_rule", "")) for b in blocks]
    anchors = [b for b, r in zip(blocks, rules) if r in (FILTER_RULE, DATA_RULE, OUTPUT_RULE)]
    if len(anchors) != 1:
        return None
    anchor = anchors[0]
    transform = str(sch.get(anchor).annotations["schedule_rule"])
    extents = [const_int(iv.dom.extent) for iv in sch.get(anchor).iter_vars]
    if transform == FILTER_RULE:  # s, k, c
        half = _named(sch, blocks, FILTER_ROWS)
        return (WinogradProblem(transform, extents[1] * extents[2], 0), anchor, half) \
            if len(blocks) == 2 and half is not None else None
    if transform == DATA_RULE:
        # s, c, p. The padding and the first pass stay; other producers are inlined.
        pad, half = _named(sch, blocks, DATA_PAD), _named(sch, blocks, DATA_ROWS)
        if pad is None or half is None:
            return None
        for block in blocks:
            if any(block.same_as(b) for b in (anchor, pad, half)):
                continue
            if not sch.get_consumers(block):
                return None  # another output: not this rule's kernel
            sch.compute_inline(block)  # a producer fused before the padding: into its reader
        return WinogradProblem(transform, extents[1] * extents[2], 0), anchor, half, pad
    # n, k, h, w. The tile size from its index.
    half = _named(sch, blocks, OUTPUT_COLUMNS)
    tile = _output_tile(sch.get(anchor))
    if tile is None or half is None:
        return None
    n, k, h, w = extents[:4]
    return WinogradProblem(transform, n * k * -(-h // tile) * -(-w // tile), tile,
                           h % tile == 0 and w % tile == 0), anchor, half


def _named(sch: s_tir.Schedule, blocks, name: str) -> Optional[SBlockRV]:
    """The one block of ``blocks`` called ``name``, else None."""
    found = [b for b in blocks if sch.get(b).name_hint == name]
    return found[0] if len(found) == 1 else None


def _output_tile(block) -> Optional[int]:
    """m, from the output block's ``h // m`` in its load of the GEMM outputs."""
    found: list = []
    tvm_ffi.structural_walk(block.body, (tirx.FloorDiv, found.append), order="post")
    sizes = {const_int(div.b) for div in found}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def _bind(sch: s_tir.Schedule, loop, threads: int):
    bx, tx = sch.split(loop, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tx


def _unroll_all_below(sch: s_tir.Schedule, block: SBlockRV, outer) -> None:
    outer_expr = sch.get(outer)
    loops = sch.get_loops(block)
    below = False
    for loop in loops:
        if below:
            sch.unroll(loop)
        below = below or sch.get(loop).same_as(outer_expr)


def _schedule_tiles(sch: s_tir.Schedule, tile: WinogradTile, anchor: SBlockRV, half: SBlockRV,
                    pad: Optional[SBlockRV] = None) -> None:
    """Data transform (``pad``: its padded input) or filter transform: ``[s, channels...]`` loops,
    a thread per channel pair, its input window and the first pass (``half``) in registers."""
    s, c, p = sch.get_loops(anchor)
    sch.reorder(c, p, s)
    tx = _bind(sch, sch.fuse(c, p), tile.threads)
    window = sch.cache_read(half, 0, "local") if pad is None else pad  # the input window, in registers
    _first_pass_in_registers(sch, half, tx)
    if pad is not None:
        sch.set_scope(pad, 0, "local")
    sch.compute_at(window, tx)
    write = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(write, tx)
    for block in (window, half, anchor, write):
        _unroll_all_below(sch, block, tx)


def _schedule_output(sch: s_tir.Schedule, problem: WinogradProblem, tile: WinogradTile, anchor: SBlockRV,
                     half: SBlockRV) -> None:
    write = sch.cache_write(anchor, 0, "local")
    auto_inline_consumer_chain(sch, write)
    n, k, h, w = sch.get_loops(anchor)
    th, vh = sch.split(h, [None, problem.tile])
    tw, vw = sch.split(w, [None, problem.tile])
    sch.reorder(n, k, th, tw, vh, vw)
    tx = _bind(sch, sch.fuse(n, k, th, tw), tile.threads)
    gemm = sch.cache_read(half, 0, "local")
    _first_pass_in_registers(sch, half, tx)
    sch.compute_at(gemm, tx)
    sch.reverse_compute_at(write, tx)
    for block in (gemm, half, anchor, write):
        _unroll_all_below(sch, block, tx)
    if tile.vector_stores:
        sch.vectorize(sch.get_loops(write)[-1])  # the tile's row: m consecutive pixels


def _first_pass_in_registers(sch: s_tir.Schedule, half: SBlockRV, tx) -> None:
    """The first pass's buffer in registers, computed in each thread where the second pass reads it."""
    sch.set_scope(half, 0, "local")
    sch.compute_at(half, tx)
