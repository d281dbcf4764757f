# The fusion-only census of the README: PYTHONPATH=. python census.py PROFILE OUT.json (each corpus model at
# batch 1 and 32: its kernels and its layout-prologue decisions); run at 04efc19 (a worktree) and at 1223bf4, then diffed.
import sys, json, warnings
warnings.simplefilter("ignore")
import tvm_fusion_hw as hw
from tvm_fusion_hw import models, pipeline
from tvm_fusion_hw.models import corpus
from tvm_fusion_hw.frontend import import_onnx
profile, out = sys.argv[1], sys.argv[2]
tgt = hw.target(profile)
res = {}
for name in corpus.names():
    for batch in (1, 32):
        try:
            mod = import_onnx(models.build(f"corpus:{name}", batch=batch), name=name)
            fuse = hw.fusion_pass(tgt)
            fused = pipeline.fused_module(mod, tgt, fuse)
            res[f"{name} b{batch}"] = {"kernels": len(pipeline.kernel_names(fused)),
                "layout": [[d.producer, d.consumer, d.fused] for d in fuse.report.decisions
                           if d.rule == "gemm-prologue" and d.reason.startswith("layout")]}
        except Exception as e:
            res[f"{name} b{batch}"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        print(name, batch, {k: (v if k != "layout" else sum(x[2] for x in v)) for k, v in res[f"{name} b{batch}"].items()}, flush=True)
json.dump(res, open(out, "w"), indent=0)
