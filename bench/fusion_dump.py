"""Dump what hardware-aware fusion makes of models, to compare two versions of the fusion code.

Per model, batch and profile: the kernels ``main`` calls (``pipeline.kernel_names``) and the
SHA-256 of each fused PrimFunc's TVMScript, fusion only (no schedule, no build). A change to the
fusion rules that must leave a profile alone is checked by dumping before and after the change
and comparing with ``--compare``::

    python bench/fusion_dump.py --out before.json --profiles nvidia-h200 amd-mi250x amd-mi300x
    # ... change the code ...
    python bench/fusion_dump.py --out after.json --profiles nvidia-h200 amd-mi250x amd-mi300x
    python bench/fusion_dump.py --compare before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import warnings

import tvm

#: the zoo and the corpus models the H200 comparison covers (issue 15)
DEFAULT_MODELS = (
    "mobilenet_v2", "resnet50", "squeezenet1_1", "bert_encoder_layer", "relu_add_mul", "eltwise5",
    "conv_relu_pool", "dw_pw", "layernorm_residual",
    "corpus:mobilenet_v2", "corpus:mobilenet_v3_large", "corpus:efficientnet_b0", "corpus:resnet50",
    "corpus:resnext50_32x4d", "corpus:densenet121", "corpus:convnext_tiny", "corpus:bert",
    "corpus:vit_b_16", "corpus:googlenet", "corpus:mnasnet1_0", "corpus:inception_v3",
)


def dump_one(mod: tvm.IRModule, profile: str) -> dict:
    """Kernel names and the hash of every fused PrimFunc's script on ``profile``."""
    from tvm_fusion_hw import pipeline  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.hardware.target import target as make_target  # pylint: disable=import-outside-toplevel

    tgt = make_target(profile)
    fuse = pipeline.fusion_pass(tgt)
    fused = pipeline.fused_module(mod, tgt, fuse)
    names = pipeline.kernel_names(fused)
    scripts = {name: hashlib.sha256(fused[name].script().encode()).hexdigest()[:16]
               for name in dict.fromkeys(names)}
    return {"kernels": names, "scripts": scripts,
            "fused": sum(1 for d in fuse.report.decisions if d.fused)}


def dump(models, batches, profiles) -> dict:
    from tvm_fusion_hw import models as zoo  # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.frontend import import_onnx  # pylint: disable=import-outside-toplevel

    out = {}
    for name in models:
        for batch in batches:
            start = time.perf_counter()
            mod = import_onnx(zoo.build(name, batch=batch), name=name)
            for profile in profiles:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out[f"{name}|b{batch}|{profile}"] = dump_one(mod, profile)
            print(f"{name} b{batch}: {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    return out


def compare(before: dict, after: dict) -> int:
    """Print every key whose kernels or scripts differ; return how many differ."""
    differ = 0
    for key in sorted(set(before) & set(after)):
        if before[key] != after[key]:
            differ += 1
            print(f"DIFFERS {key}: {len(before[key]['kernels'])} -> {len(after[key]['kernels'])} kernels")
    common = len(set(before) & set(after))
    print(f"{common - differ} of {common} (model, batch, profile) identical; "
          f"{len(set(before) ^ set(after))} in only one dump")
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--profiles", nargs="+", default=["nvidia-h200", "amd-mi250x", "amd-mi300x"])
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        with open(args.compare[0]) as a, open(args.compare[1]) as b:
            return 1 if compare(json.load(a), json.load(b)) else 0
    result = dump(args.models, args.batches, args.profiles)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
