#!/bin/bash
# Device call (2026-12-05): batch 32 after ab28db2 on the thirteen corpus models where the nvidia-h200
# profile takes Winograd for at least one 3x3 convolution at batch 32; hw against winograd=off and stock,
# onnxruntime as the reference, with the per-kernel profile. Built here with
#   M="resnet18 resnet50 wide_resnet50_2 densenet121 googlenet inception_v3 vgg11_bn alexnet fcn_resnet50
#      timm_resnet26d hrnet_w18_small dla34 squeezenet1_0"
#   tvm-fusion-hw bundle --out .bundle_w32 --models $(for m in $M; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.nowino:corpus:$m:winograd=off; done)
# (the runtime travels as .bundle_w32/rt.tar.xz, xz of tvm_runtime and wheels: the 64 MiB limit)
export PYTHONUNBUFFERED=1
[ -d .bundle_w32/tvm_runtime ] || tar -C .bundle_w32 -xJf .bundle_w32/rt.tar.xz
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 520 python3 .bundle_w32/run.py --out /tmp/w32 --batches 32 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/w32.log 2>&1; echo "rc=$?" >> $R/w32.log
cp /tmp/w32/results.json /tmp/w32/kernels.md $R/
