#!/bin/bash
# Device call 3 (2026-12-04): after the filter transforms moved into main_transform_params (the
# weights transformed once, not every inference): the three batch-32 models call 2 did not reach,
# ResNet-18 b32 again (its filters now lifted: call 1 ran them every inference), and the batch-1
# rows where the H200 takes Winograd (Inception-v3, FCN-ResNet50: one layer each; VGG-11: five),
# hw against winograd=off; memcheck of VGG-11 b1. Built here (from the commit after c59ed12's
# follow-up, the working tree's lift) with
#   M="mobilevit_xs hrnet_w18_small dla34 resnet18"
#   tvm-fusion-hw bundle --out .bundle_wino3 --models $(for m in $M; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.nowino:corpus:$m:winograd=off; done)
#   M="inception_v3 fcn_resnet50 vgg11_bn"; the same into .bundle_wino3b1 with --batches 1
# (the runtime travels as .bundle_wino3/rt.tar.xz, xz of tvm_runtime and wheels: the 64 MiB limit)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
[ -d .bundle_wino3/tvm_runtime ] || tar -C .bundle_wino3 -xJf .bundle_wino3/rt.tar.xz
[ -d .bundle_wino3b1/tvm_runtime ] || cp -r .bundle_wino3/tvm_runtime .bundle_wino3/wheels .bundle_wino3b1/
R=res3
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 260 python3 .bundle_wino3/run.py --out $R/time --batches 32 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/time.log 2>&1; echo "rc=$?" >> $R/time.log
echo "b32 done $(( $(date +%s) - T0 ))s"
timeout 150 python3 .bundle_wino3b1/run.py --out $R/b1 --batches 1 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/b1.log 2>&1; echo "rc=$?" >> $R/b1.log
echo "b1 done $(( $(date +%s) - T0 ))s"
left=$(( 500 - ($(date +%s) - T0) ))
timeout $left compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 python3 .bundle_wino3b1/run.py \
  --out $R/san_mem --models corpus:vgg11_bn --batches 1 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/san_mem.log 2>&1; echo "rc=$?" >> $R/san_mem.log
echo "memcheck done $(( $(date +%s) - T0 ))s"
grep -E "ERROR SUMMARY" $R/san_mem.log | sort | uniq -c | head -3; tail -n 1 $R/san_mem.log
grep -h "ms, rel\|against" $R/time.log $R/b1.log | head -60
rm -rf $R/*/results.png
tar czf $OUT/res3.tgz $R
echo "all done $(( $(date +%s) - T0 ))s"
