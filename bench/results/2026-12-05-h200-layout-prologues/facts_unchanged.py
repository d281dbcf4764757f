# Whether source_access changes any GEMM kernel's layout facts with layout_prologues off (the default): old facts
# (the operand as read) against new, every GEMM kernel of the given corpus models at batch 1 and 32.
# PYTHONPATH=. python bench/results/2026-12-05-h200-layout-prologues/facts_unchanged.py resnet50 efficientnet_b0 ...
"""Old (intermediate buffer) vs new (source through inlined producers) fetch facts, every GEMM kernel."""
import sys, warnings; warnings.simplefilter("ignore"); sys.path.insert(0, "tests")
import tvm_fusion_hw as hw
from tvm import s_tir
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks
from tvm_fusion_hw.schedules.base.source_access import source_access
from tvm_fusion_hw.schedules.gemm.groups import split_groups
from tvm_fusion_hw.schedules.gemm.rule import _last_index_is_spatial, _rows_align
from tvm_fusion_hw.schedules.gemm.normalize import gemm_index_maps
from tir_checks import fused_funcs
target = hw.target("nvidia-h200")
total = diff = 0
for model, batch in [(m, b) for m in sys.argv[1:] for b in (1, 32)]:
    funcs = fused_funcs(f"corpus:{model}", batch, target)
    for name, func in funcs.items():
        try:
            sch = s_tir.Schedule(split_groups(func.with_attr("global_symbol", "main")))
            red = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
        except Exception:
            continue
        if not red:
            continue
        gemm = red[0]; stmt = sch.get(gemm)
        if len(stmt.reads) < 2 or gemm_index_maps(stmt) is None:
            continue
        old = tuple(_last_index_is_spatial(stmt, stmt.reads[i].region[-1].min) for i in (0, 1)) + \
              tuple(_last_index_is_spatial(stmt, stmt.reads[i].region[-1].min, bare=True) and _rows_align(stmt.reads[i].source, 2) for i in (0, 1))
        src = [source_access(sch, gemm, i) for i in (0, 1)]
        new = tuple(_last_index_is_spatial(stmt, ix[-1]) for _, ix in src) + \
              tuple(_last_index_is_spatial(stmt, ix[-1], bare=True) and _rows_align(b, 2) for b, ix in src)
        total += 1
        if old != new:
            diff += 1
            print("DIFF", model, batch, name, old, new, flush=True)
    print(model, "done", total, diff, flush=True)
