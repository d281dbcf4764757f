# The fusion-only census of the README: PYTHONPATH=. python census.py BATCH (kernels per corpus model with
# layout_prologues on and off on the H200 profile, and the layout prologues fused and declined).
import sys, time, warnings, json
warnings.simplefilter("ignore")
import tvm_fusion_hw as hw
from tvm_fusion_hw import models, pipeline
from tvm_fusion_hw.models import corpus
from tvm_fusion_hw.frontend import import_onnx
batch = int(sys.argv[1])
tgt = hw.target("nvidia-h200")
out = {}
for name in corpus.names():
    t = time.time()
    try:
        mod = import_onnx(models.build(f"corpus:{name}", batch=batch), name=name)
        res = {}
        for flag in (True, False):
            fuse = hw.fusion_pass(tgt, layout_prologues=flag)  # noqa: the knob under test
            fused = pipeline.fused_module(mod, tgt, fuse)
            res[flag] = len(pipeline.kernel_names(fused))
            if flag:
                res["layout"] = sum(1 for d in fuse.report.decisions if d.rule == "gemm-prologue" and d.fused and d.reason.startswith("layout"))
                res["declined"] = sum(1 for d in fuse.report.decisions if d.rule == "gemm-prologue" and not d.fused and d.reason.startswith("layout"))
                res["sliced"] = sum(1 for d in fuse.report.decisions if d.rule == "split-slices" and d.fused)
        out[name] = res
        print(name, batch, res, f"{time.time()-t:.0f}s", flush=True)
    except Exception as e:
        print(name, batch, "ERROR", type(e).__name__, str(e)[:200], flush=True)
json.dump(out, open(f"/tmp/scan_b{batch}.json", "w"))
