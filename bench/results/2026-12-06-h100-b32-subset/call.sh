#!/bin/bash
# Device call: ten corpus models at batch 32 (the eight behind torch.compile + CUDA graphs in
# corpus-9, ResNet-50 and MobileNetV2 for the two latency goals), built at a7bfaa7 with
#   tvm-fusion-hw bundle --out .bundle_b32x --models corpus:resnet50 corpus:mobilenet_v2 corpus:vgg11_bn \
#     corpus:alexnet corpus:deit_tiny corpus:vit_b_16 corpus:swin_t corpus:mixer_b16 corpus:gpt2 corpus:llama \
#     --batches 32
# every row against onnxruntime and timed with PyTorch eager and torch.compile + CUDA graphs in the
# same run (runner flags as ../2026-12-03-h200-corpus-8/call4.sh).
export PYTHONUNBUFFERED=1
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 560 python3 .bundle_b32x/run.py --out /tmp/b32x --repeat 5 --min-repeat-ms 5 --onnxruntime \
  --torch eager compile_graphs --torch-warm 10 --no-isolate --time-budget 480 > $R/run.log 2>&1
echo "rc=$?" >> $R/run.log
cp /tmp/b32x/results.json /tmp/b32x/*.md $R/ 2>/dev/null
tail -n 3 $R/run.log
