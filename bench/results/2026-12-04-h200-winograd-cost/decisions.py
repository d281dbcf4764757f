"""Winograd decisions per model, batch and profile (the rewrite alone on the imported graphs, as the
pipeline runs it: both ways costed with the templates' tile model).

    python bench/results/2026-12-04-h200-winograd-cost/decisions.py > decisions.md
"""
import sys

from tvm_fusion_hw.bundle.model_import import import_model
from tvm_fusion_hw.hardware.profile import load_profile
from tvm_fusion_hw.schedules.planners import kernel_plan
from tvm_fusion_hw.winograd_conv import WinogradConv2d

MODELS = ("resnet18 resnet50 wide_resnet50_2 efficientnet_v2_s densenet121 googlenet inception_v3 squeezenet1_0 "
          "alexnet vgg11_bn maxvit_t deeplabv3_mobilenet_v3_large fcn_resnet50 timm_resnet26d mobilevit_xs "
          "hrnet_w18_small dla34").split()
COLUMNS = [(1, "nvidia-h200"), (1, "nvidia-rtx-3060"), (32, "nvidia-h200"), (32, "nvidia-rtx-3060")]


def main():
    models = sys.argv[1:] or MODELS
    passes = {name: WinogradConv2d(load_profile(name), kernel_plan=kernel_plan) for _, name in COLUMNS}
    print("| model | b1 H200 | b1 RTX 3060 | b32 H200 | b32 RTX 3060 |\n| --- | ---: | ---: | ---: | ---: |")
    for model in models:
        cells = []
        for batch, name in COLUMNS:
            rewrite = passes[name]
            rewrite(import_model("corpus:" + model, batch)[1])
            cells.append(f"{sum(d.fused for d in rewrite.decisions)}/{len(rewrite.decisions)}")
        print(f"| {model} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
