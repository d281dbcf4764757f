"""Where a block's operand is really read from once the blocks that make it are inlined.

A fused kernel may make a contraction's operand itself: a prologue of copies (a transpose, a
reshape, a squeeze, a slice) and element-wise ops (an SE block's scale) that the template inlines
into its operand loads. Those loads then read the producers' input through the composed index,
so which way a copy coalesces, and whether it may move a vector at once, is a question about
that buffer's layout, not the intermediate's. :func:`source_access` follows the operand back
through each producer to the buffer its loads will read, composing the indices.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import tvm
from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight.analysis import get_root_block

from .tir_match import const_int, is_plain_spatial, tensor_loads
from .vector_lanes import substitute


def _elements(buffer: tirx.Buffer) -> int:
    sizes = [const_int(d) for d in buffer.shape]
    return -1 if None in sizes else math.prod(sizes)


def source_access(sch: s_tir.Schedule, block, read: int) -> Tuple[tirx.Buffer, List[tirx.Expr]]:
    """``(buffer, indices)`` that ``block``'s operand ``read`` reads once its producers are
    inlined, the indices in ``block``'s iterators.

    Each producer is followed through its largest load (the data it copies or scales; a scale or
    a bias is smaller, a padding guard's branch is the data); the walk stops at a parameter, at a
    reduction, and at a producer that is not a plain spatial block (then its output is what the
    loads read). An operand read over more than one element per iteration, or made only by
    producers that read element for element (a scale, an activation), is returned as read.
    """
    stmt = sch.get(block)
    region = stmt.reads[read]
    buffer, indices = region.source, [r.min for r in region.region]
    if any(const_int(r.extent) != 1 for r in region.region):
        return buffer, indices
    analyzer = sym.Analyzer()
    for iv in stmt.iter_vars:
        analyzer.bind(iv.var, tvm.ir.Range.from_min_extent(iv.dom.min, iv.dom.extent))
    blocks = [sch.get(b) for b in sch.get_child_blocks(get_root_block(sch))]
    read_as, moved = (buffer, indices), False
    for _ in range(len(blocks)):
        producer = next((b for b in blocks if any(w.source.same_as(buffer) for w in b.writes)), None)
        if producer is None or len(producer.writes) != 1 or not is_plain_spatial(producer, buffer):
            break
        loads = [ld for ld in tensor_loads(producer.body.value) if len(ld.indices) > 0]
        if not loads:
            break
        largest = max(loads, key=lambda ld: _elements(ld.source))  # the first of equals
        store = producer.body.indices
        moved = moved or len(largest.indices) != len(store) or not all(
            i.same_as(v) for i, v in zip(largest.indices, store))
        mapping = list(zip(store, indices))
        buffer = largest.source
        indices = [analyzer.simplify(substitute(i, mapping)) for i in largest.indices]
    # element-wise producers read their input where the operand is: the operand's own index then
    # says the same, unsimplified (the rule's layout facts were tuned on it)
    return (buffer, indices) if moved else read_as
