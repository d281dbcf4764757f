"""dlight's GEMM index maps, extended to reductions over one element (``K = 1``).

dlight (:func:`tvm.s_tir.dlight.gpu.matmul.get_index_map`) sorts a reduction block's iterators
into ``S`` (in A, B and C), ``I`` (A and C), ``J`` (B and C) and ``K`` (reduced, in A and B), and
drops every iterator of extent 1 as trivial. A GEMM whose whole reduction has extent 1 (a 1x1 conv
of one input channel, a ``[M, 1] x [1, N]`` matmul) then has no ``K`` and is not a GEMM to dlight.
:func:`gemm_index_maps` keeps one unit reduction iterator that indexes both operands as ``K``, so
the block normalises to ``C[S, I, J] += A[S, I, K] * B[S, J, K]`` with ``K`` of extent 1.

TVM's ``transform_block_layout`` makes every iterator of extent 1 spatial, so the normalised block
keeps its ``init`` with no reduction iterator left: it still computes ``C = 0; C += A * B`` once per
output (an ``init`` runs when every reduction iterator is at its start, here always), and
``decompose_reduction`` splits it as usual. It must not be padded along ``K``, though (a padded
spatial ``K`` would redo the init at every step): the tile model gives such a GEMM one K step of
exactly ``K`` (:func:`tvm_fusion_hw.schedules.gemm.tiles.depth_steps`).

The same sorting says which way an operand's copy into shared memory runs
(:func:`row_col_iters`, :func:`last_index_is_spatial`): along a row or column iterator where the
operand's innermost index moves with one, else along ``K``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.matmul import IterKind, IterTrait, get_index_map, make_iter_fusion_index_map


def _is_one(extent) -> bool:
    return isinstance(extent, tirx.IntImm) and extent.value == 1


def _access_vars(regions) -> Optional[set]:
    """The variables of a buffer region's indices; None unless it is one element."""
    found = set()
    for rng in regions:
        if not _is_one(rng.extent):
            return None
        found |= set(tirx.analysis.undefined_vars(rng.min, []))
    return found


def _unit_depth_traits(block: s_tir.SBlock):
    """dlight's iterator traits of ``block`` (A's, B's, C's, the block's) for a reduction whose
    every reduced iterator has extent 1, the first of them that indexes both operands taken as
    ``K``; None otherwise (and where dlight would refuse the block for another reason)."""
    if len(block.reads) != 2 or len(block.writes) != 1:
        return None
    reduced = [iv for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    if not reduced or not all(_is_one(iv.dom.extent) for iv in reduced):
        return None
    a_vars, b_vars, c_vars = (_access_vars(r.region) for r in (block.reads[0], block.reads[1], block.writes[0]))
    if a_vars is None or b_vars is None or c_vars is None:
        return None
    depth = next((iv.var for iv in reduced if iv.var in a_vars and iv.var in b_vars and iv.var not in c_vars), None)
    if depth is None:
        return None
    traits = {}
    for iv in block.iter_vars:
        var = iv.var
        if var.same_as(depth):
            kind = IterKind.kIter_K
        elif _is_one(iv.dom.extent):
            kind = IterKind.kIter_T
        elif iv.iter_type != tirx.IterVar.DataPar:
            return None
        elif var in a_vars and var in b_vars and var in c_vars:
            kind = IterKind.kIter_S
        elif var in a_vars and var in c_vars:
            kind = IterKind.kIter_I
        elif var in b_vars and var in c_vars:
            kind = IterKind.kIter_J
        else:
            return None
        traits[var] = IterTrait(kind, iv.dom.extent)
    if not {IterKind.kIter_I, IterKind.kIter_J} <= {t.kind for t in traits.values()}:
        return None

    def of(used):
        return [traits[iv.var] for iv in block.iter_vars if iv.var in used]

    return of(a_vars), of(b_vars), of(c_vars), [traits[iv.var] for iv in block.iter_vars]


def gemm_index_maps(block: s_tir.SBlock) -> Optional[Tuple[tirx.IndexMap, ...]]:
    """``(block map, A map, B map, C map)`` to ``[S, I, J, K]``, ``[S, I, K]``, ``[S, J, K]`` and
    ``[S, I, J]``: dlight's, or for a reduction over one element the same with that element as
    ``K``; None when ``block`` is not a GEMM."""
    maps = get_index_map(block)
    if maps is not None:
        return maps
    traits = _unit_depth_traits(block)
    if traits is None:
        return None
    a_traits, b_traits, c_traits, block_traits = traits
    s, i, j, k = IterKind.kIter_S, IterKind.kIter_I, IterKind.kIter_J, IterKind.kIter_K
    return (make_iter_fusion_index_map(block_traits, [s, i, j, k]), make_iter_fusion_index_map(a_traits, [s, i, k]),
            make_iter_fusion_index_map(b_traits, [s, j, k]), make_iter_fusion_index_map(c_traits, [s, i, j]))


def row_col_iters(stmt: s_tir.SBlock, matmul_map: tirx.IndexMap) -> List[tirx.Var]:
    """``stmt``'s spatial iterators that make the GEMM's rows or columns (``I`` or ``J`` of
    ``matmul_map``), not only its batch ``S``: a block's copy runs along one of them or along K.
    A batch iterator can sit in an operand's innermost index (attention's head, when a layout
    prologue reads Q and K out of one packed ``[.., tokens, 3 x heads x dim]`` buffer), but it is
    fixed within a block, so the copy must still run along the head's dim, K."""
    s_expr, i_expr, j_expr, _ = matmul_map.final_indices
    in_rows_cols = tirx.analysis.undefined_vars(i_expr, []) + tirx.analysis.undefined_vars(j_expr, [])
    only_batch = [v for v in tirx.analysis.undefined_vars(s_expr, [])
                  if not any(v.same_as(u) for u in in_rows_cols)]
    return [iv.var for iv, mapped in zip(stmt.iter_vars, matmul_map.initial_indices)
            if iv.iter_type == tirx.IterVar.DataPar and not any(mapped.same_as(b) for b in only_batch)]


def last_index_is_spatial(spatial: Sequence[tirx.Var], last: tirx.Expr, bare: bool = False) -> bool:
    """Whether an operand's innermost index ``last`` moves with one of the GEMM's ``spatial`` row
    or column iterators (:func:`row_col_iters`; not only K); with ``bare``, whether it is that
    iterator alone."""
    if bare:
        return any(last.same_as(s) for s in spatial)
    used = tirx.analysis.undefined_vars(last, [])
    return any(v.same_as(s) for v in used for s in spatial)
