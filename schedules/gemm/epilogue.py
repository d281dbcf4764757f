"""The GEMM's epilogue operands staged in registers: what the write-back reads once per thread."""

from __future__ import annotations

from tvm import s_tir, tirx

from tvm_fusion_hw.schedules.base.tir_match import const_int
from tvm_fusion_hw.schedules.base.vector_lanes import substitute


def stage_broadcast_operands(sch: s_tir.Schedule, write_back: s_tir.schedule.SBlockRV, thread_loop) -> None:
    """Each global operand of the write-back (the epilogue, inlined) that one of the thread's
    output loops does not index, such as a bias along the rows, is loaded into registers under
    ``thread_loop``, once per thread. Otherwise it is loaded once per output, under the output's
    bounds guard, where nvcc does not hoist it. The cached loads keep the outputs' bounds (TVM
    derives their guard from the write-back's)."""
    loops = sch.get_loops(write_back)
    thread = sch.get(thread_loop)
    at = next((i for i, loop in enumerate(loops) if sch.get(loop).same_as(thread)), None)
    realize = sch.get(loops[-1]).body
    if at is None or not isinstance(realize, s_tir.SBlockRealize):
        return
    inner = [sch.get(loop).loop_var for loop in loops[at + 1:] if const_int(sch.get(loop).extent) != 1]
    block = sch.get(write_back)
    mapping = list(zip([iv.var for iv in block.iter_vars], realize.iter_values))
    staged = []
    for index, region in enumerate(block.reads):
        if region.source.scope() != "global":
            continue
        used = [tirx.analysis.undefined_vars(substitute(r.min, mapping), []) for r in region.region]
        if all(any(v.same_as(u) for found in used for u in found) for v in inner):
            continue  # a different element for every output (a residual): nothing is reused
        staged.append(index)
    for index in staged:  # cache_read keeps the read's position, so the indices stay valid
        sch.compute_at(sch.cache_read(write_back, index, "local"), thread_loop, preserve_unit_loops=True)
