"""Compile time of the hw pipeline (H200, under hw.pass_context) with ImplicitGemm's K step rolled (the
default) and unrolled (unroll_async_depth), twice each, and stock once: python compile_unrolled.py resnet50@1 bert@32"""
import dataclasses, json, sys, time, warnings
import tvm
from tvm import relax
import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.models import build
from tvm_fusion_hw.schedules import default_rules
from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm

class Unrolled(ImplicitGemm):
    def get_config(self, target):
        return dataclasses.replace(super().get_config(target), unroll_async_depth=True)

def rules(unrolled):
    return [Unrolled() if (unrolled and isinstance(r, ImplicitGemm)) else r for r in default_rules()]

target = hw.target("nvidia-h200")
out = []
for model, batch in [(m.split("@")[0], int(m.split("@")[1])) for m in sys.argv[1:]]:
    mod = relax.transform.LiftTransformParams()(import_onnx(build(f"corpus:{model}", batch=batch), keep_params_in_input=True))
    for form in ("rolled", "unrolled", "rolled", "unrolled"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.time()
            with hw.pass_context(target):
                tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target, schedules=rules(form == "unrolled")))
            s = time.time() - start
        stock_s = None
        out.append({"model": model, "batch": batch, "form": form, "seconds": round(s, 2)})
        print(json.dumps(out[-1]), flush=True)
    start = time.time()
    tvm.compile(mod, target=target, relax_pipeline=hw.stock_pipeline(target))
    print(json.dumps({"model": model, "batch": batch, "form": "stock", "seconds": round(time.time() - start, 2)}), flush=True)
