#!/bin/bash
# Device call: twelve corpus models at batch 1 (the ten of ../2026-12-06-h100-b32-subset/ and the
# issue's ConvNeXt-T and ResNeXt-50), built at 2359e98 with
#   tvm-fusion-hw bundle --out .bundle_b1x --models corpus:resnet50 corpus:mobilenet_v2 corpus:vgg11_bn \
#     corpus:alexnet corpus:deit_tiny corpus:vit_b_16 corpus:swin_t corpus:mixer_b16 corpus:gpt2 corpus:llama \
#     corpus:convnext_tiny corpus:resnext50_32x4d --batches 1
# every row against onnxruntime and timed with PyTorch eager and torch.compile + CUDA graphs in the
# same run (runner flags as ../2026-12-03-h200-corpus-8/call4.sh, 10 repeats at batch 1).
export PYTHONUNBUFFERED=1
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 560 python3 .bundle_b1x/run.py --out /tmp/b1x --repeat 10 --min-repeat-ms 5 --onnxruntime \
  --torch eager compile_graphs --torch-warm 12 --no-isolate --time-budget 480 > $R/run.log 2>&1
echo "rc=$?" >> $R/run.log
cp /tmp/b1x/results.json /tmp/b1x/*.md $R/ 2>/dev/null
tail -n 3 $R/run.log
