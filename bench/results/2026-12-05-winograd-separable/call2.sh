#!/bin/bash
# Device call 2 (2026-12-05, H100: no H200 could be had): batch 32 again after ab28db2 (call 1 found
# the separable output transform falling to dlight's GeneralReduction on GoogLeNet, HRNet and
# ResNet-50 at batch 32), hw against winograd=off and stock, onnxruntime as the reference, with the
# per-kernel profile. Built here with
#   M="googlenet hrnet_w18_small resnet50"
#   tvm-fusion-hw bundle --out .bundle_fix --models $(for m in $M; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.nowino:corpus:$m:winograd=off; done)
# (the runtime travels as .bundle_fix/rt.tar.xz, xz of tvm_runtime and wheels: the 64 MiB limit)
export PYTHONUNBUFFERED=1
[ -d .bundle_fix/tvm_runtime ] || tar -C .bundle_fix -xJf .bundle_fix/rt.tar.xz
R=${OUT:-.}/res2
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 200 python3 .bundle_fix/run.py --out /tmp/b32 --batches 32 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/b32.log 2>&1; echo "rc=$?" >> $R/b32.log
cp /tmp/b32/results.json /tmp/b32/kernels.md $R/
