#!/bin/bash
# Device call 1 (2026-12-05; asked for the H200, ran on an H100): the Winograd rule costed both
# ways (5004e80), the output transform's row stores (1a6972e) and the separable transforms (84c0144): (1) memcheck of
# ResNet-18 b1 (row stores where 56x56 and 28x28 tile exactly, scalar ones where 7x7 overhangs);
# (2) batch 1, the models where the rule now takes layers, hw against winograd=off and stock,
# torch.compile + CUDA graphs in the same process, onnxruntime as the numerics reference; (3) batch
# 32, hw against winograd=off (the separable transforms against the numbers of 2026-12-04). The
# bundles built here with
#   M1="resnet18 resnet50 densenet121 hrnet_w18_small googlenet vgg11_bn"
#   M32="resnet50 densenet121 googlenet hrnet_w18_small"
#   tvm-fusion-hw bundle --out .bundle_b1 --models $(for m in $M1; do echo corpus:$m; done) --batches 1 \
#     --profile nvidia-h200 --no-graph $(for m in $M1; do echo --variant $m.nowino:corpus:$m:winograd=off; done)
#   the same for .bundle_b32 with $M32 and --batches 32
# (the runtime travels as .bundle_b1/rt.tar.xz, xz of tvm_runtime and wheels: the 64 MiB limit)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
[ -d .bundle_b1/tvm_runtime ] || tar -C .bundle_b1 -xJf .bundle_b1/rt.tar.xz
[ -d .bundle_b32/tvm_runtime ] || cp -r .bundle_b1/tvm_runtime .bundle_b1/wheels .bundle_b32/
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 130 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 python3 .bundle_b1/run.py \
  --out $R/san_mem --models corpus:resnet18 --batches 1 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/san_mem.log 2>&1; echo "rc=$?" >> $R/san_mem.log
echo "memcheck done $(( $(date +%s) - T0 ))s"
timeout 190 python3 .bundle_b1/run.py --out $R/b1 --batches 1 --no-graph --torch compile_graphs --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate --time-budget 160 > $R/b1.log 2>&1; echo "rc=$?" >> $R/b1.log
echo "b1 done $(( $(date +%s) - T0 ))s"
left=$(( 430 - ($(date +%s) - T0) ))
timeout $left python3 .bundle_b32/run.py --out $R/b32 --batches 32 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate --time-budget $(( left - 20 )) > $R/b32.log 2>&1; echo "rc=$?" >> $R/b32.log
echo "b32 done $(( $(date +%s) - T0 ))s"
