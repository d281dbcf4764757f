#!/bin/bash
# Device call (2026-12-04, third session): Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions
# (tvm_fusion_hw/winograd_conv.py, schedules/winograd) against the same models with winograd=off,
# batch 1 and 32, per-kernel times, onnxruntime checks, torch.compile + CUDA graphs in the same
# process; memcheck on ResNet-18 at batch 32 (every Winograd kernel form). Built here with
#   M="vgg11_bn resnet18 resnet50 densenet121 alexnet"
#   tvm-fusion-hw bundle --out .bundle_wino --models $(for m in $M; do echo corpus:$m; done) --batches 1 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.nowino:corpus:$m:winograd=off; done)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
R=res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 400 python3 .bundle_wino/run.py --out $R/time --batches 1 32 --no-graph --torch compile_graphs --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate --time-budget 330 > $R/time.log 2>&1; echo "rc=$?" >> $R/time.log
echo "timing done $(( $(date +%s) - T0 ))s"
left=$(( 560 - ($(date +%s) - T0) ))
timeout $left compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 python3 .bundle_wino/run.py \
  --out $R/san_mem --models corpus:resnet18 --batches 32 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/san_mem.log 2>&1; echo "rc=$?" >> $R/san_mem.log
echo "memcheck done $(( $(date +%s) - T0 ))s"
grep -E "ERROR SUMMARY" $R/san_mem.log | sort | uniq -c | head -3; tail -n 1 $R/san_mem.log
grep -h "ms, rel\|against\|torch" $R/time.log | head -60
rm -rf $R/*/results.png
tar czf $OUT/res.tgz $R
echo "all done $(( $(date +%s) - T0 ))s"
