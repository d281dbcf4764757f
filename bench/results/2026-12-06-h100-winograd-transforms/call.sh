#!/bin/bash
# Device call: the Winograd transforms written as sums (48972b3) against the reductions before
# (473bafa), on the GPU. Built here (the "before" files checked out in the same tree, since the
# editable install maps tvm_fusion_hw.schedules to the main checkout):
#   tvm-fusion-hw bundle --out .bundle_wt_{before,after} --models corpus:resnet18 corpus:vgg11_bn \
#     corpus:resnet50 corpus:dla34 --batches 1 32 --no-graph
#   python bench/sanitize_kernels.py --out .bundle_sanwino --batches 1 32 --rules WinogradTransform \
#     --models resnet18 vgg11_bn resnet50 dla34                        # after only: 59 kernels
# The three bundles share TVM's runtime (identical files): it travels once, in .bundle_wt_after.
# bash call.sh san|before|after
export PYTHONUNBUFFERED=1
R=${OUT:-.}/res
mkdir -p $R
for B in .bundle_wt_before .bundle_sanwino; do
  [ -d $B/tvm_runtime ] || cp -r .bundle_wt_after/tvm_runtime .bundle_wt_after/wheels $B/
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu_$1.txt
if [ "$1" = san ]; then
  for tool in memcheck racecheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 python3 .bundle_sanwino/run_kernels.py \
      > $R/$tool.log 2>&1; echo "rc=$?" >> $R/$tool.log
  done
else
  timeout 280 python3 .bundle_wt_$1/run.py --out /tmp/$1 --batches 1 32 --no-graph --no-torch --repeat 20 \
    --min-repeat-ms 5 --onnxruntime --kernel-profile --time-budget 240 > $R/run_$1.log 2>&1
  echo "rc=$?" >> $R/run_$1.log
  mkdir -p $R/$1 && cp /tmp/$1/results.json /tmp/$1/*.md $R/$1/ 2>/dev/null
fi
