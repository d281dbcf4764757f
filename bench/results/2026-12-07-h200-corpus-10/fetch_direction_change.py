"""Which GEMM kernels of a model change their copy direction with 04a63ec (a batch iterator in an operand's innermost
index no longer counts as a row or column): the old test (any spatial iterator) against the new, per kernel.

    PYTHONPATH=. python fetch_direction_change.py corpus:deit_tiny:32 corpus:bert:32 ...
"""
import sys
import tvm
from tvm import s_tir, tirx
import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.model_import import import_model
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.source_access import source_access
from tvm_fusion_hw.schedules.gemm.normalize import gemm_index_maps, last_index_is_spatial, row_col_iters
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks

target = hw.target("nvidia-h200")
for spec in sys.argv[1:]:
    model, batch = spec.rsplit(":", 1)
    with hw.pass_context(target):
        fused = fused_module(import_model(model, int(batch))[1], target, hw.fusion_pass(target))
    changed, gemms = [], 0
    for gv, func in fused.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            sch = s_tir.Schedule(func)
            reds = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
            if not reds:
                continue
            stmt = sch.get(reds[0])
            maps = gemm_index_maps(stmt)
            if maps is None or len(stmt.reads) < 2:
                continue
            sources = [source_access(sch, reds[0], i) for i in (0, 1)]
        except Exception:
            continue
        gemms += 1
        every = [iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
        old = tuple(last_index_is_spatial(every, ix[-1]) for _, ix in sources)
        new = tuple(last_index_is_spatial(row_col_iters(stmt, maps[0]), ix[-1]) for _, ix in sources)
        if old != new:
            changed.append(f"{gv.name_hint} {old}->{new}")
    print(f"{spec}: {len(changed)} of {gemms} GEMM kernels change", *changed, sep="\n  ", flush=True)
