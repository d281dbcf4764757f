"""EliminateDeadBlocks: drop TIR blocks whose results nothing reads, after FuseTIR.

Fusing an inference ``batch_norm`` into a convolution's epilogue brings its other two outputs
(the running statistics) into the fused PrimFunc as intermediates that nothing reads. dlight
schedules only the blocks on the path to the outputs and leaves such dead blocks as host loops
over device memory (a crash at run time, not at build time). Removing them is both the fix and
free speed. A block is dead when every buffer it writes is allocated inside the function and no
other block reads it; removing one can make its producers dead, so the pass repeats.
"""

from __future__ import annotations

import tvm
from tvm import s_tir


def _dead_blocks(sch: s_tir.Schedule):
    func = sch.mod["main"]
    params = {p.name for p in func.params}
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        writes = {w.source.name for w in block.writes}
        if writes and not writes & params and not sch.get_consumers(block_rv):
            yield block_rv


def eliminate_dead_blocks(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` without blocks whose results are never read."""
    sch = s_tir.Schedule(func)
    changed = True
    while changed:
        changed = False
        for block_rv in list(_dead_blocks(sch)):
            # compute_inline of a block with no consumers removes it.
            sch.compute_inline(block_rv)
            changed = True
    return sch.mod["main"]


@tvm.transform.module_pass(opt_level=0, name="EliminateDeadBlocks")
class EliminateDeadBlocks:
    """Remove dead blocks from every PrimFunc of the module (see the module docstring)."""

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        functions = dict(mod.functions.items())
        for gvar, func in mod.functions.items():
            if not isinstance(func, tvm.tirx.PrimFunc):
                continue
            try:
                functions[gvar] = eliminate_dead_blocks(func)
            except s_tir.ScheduleError:
                continue  # a function the schedule cannot analyse keeps its blocks
        return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
