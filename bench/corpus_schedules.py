"""Which rule schedules each kernel of every corpus model (H200 profile, batch 1 and 32).

Fusion and scheduling as ``get_pipeline`` runs them under ``hw.pass_context``, each template's
kernel built alone as the guard builds it (``--verify``, default ``build``; ``none`` is faster and
counts what the templates match): per model and batch, the kernel calls on a template, on dlight,
the same for the conv and matmul kernels (named ``conv``/``matmul``/``dense`` by TVM), and any
template that fell back. Writes JSON (``--out``).
Usage: ``python bench/corpus_schedules.py --out FILE [--batches 1 32] [--verify build]``.
"""

import argparse
import json
import re
import warnings

import tvm
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.guarded_schedule import dlight_rules
from tvm_fusion_hw.models import build, corpus
from tvm_fusion_hw.pipeline import fused_module, kernel_names, schedule_pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    ap.add_argument("--profile", default="nvidia-h200")
    ap.add_argument("--verify", default="build", choices=("build", "none"))
    args = ap.parse_args()
    target = hw.target(args.profile)
    dlight = {type(r).__name__ for r in dlight_rules()}
    rows = []
    warnings.simplefilter("ignore")
    for name in corpus.names():
        for batch in args.batches:
            mod = relax.transform.LiftTransformParams()(
                import_onnx(build(f"corpus:{name}", batch=batch), keep_params_in_input=True))
            with target, hw.pass_context(target):
                fused = fused_module(mod, target, hw.fusion_pass(target))
                sched = schedule_pass(verify=args.verify)
                sched(fused)
            calls = kernel_names(fused)
            rules = sched.log.rules
            on_dlight = [k for k in calls if rules.get(k) in dlight]
            gemms = [k for k in calls if re.search(r"conv|matmul|dense", k)]
            rows.append({"model": name, "batch": batch, "kernels": len(calls),
                         "on_template": len(calls) - len(on_dlight), "on_dlight": len(on_dlight),
                         "conv_matmul": len(gemms), "conv_matmul_on_dlight": sorted(k for k in gemms if k in on_dlight),
                         "dlight_rules": sorted({rules[k] for k in on_dlight}),
                         "fallbacks": [str(f) for f in sched.log.fallbacks]})
            print(name, batch, rows[-1]["on_template"], rows[-1]["on_dlight"], flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
