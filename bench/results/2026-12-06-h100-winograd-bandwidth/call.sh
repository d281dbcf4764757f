#!/bin/bash
# Device call (an H100 asked for): the Winograd rule's bandwidth term on the GPU it is about. Each
# model at batch 1 is built three ways for sm_90 with the H100's limits (they are the H200's):
# "hw" with the nvidia-h100-sxm profile's decisions (after the GEMM's byte efficiency was measured,
# winograd_cost.py: the 512-channel 7x7 layers direct), "<m>.h200plan" with the nvidia-h200
# profile's decisions (those layers by Winograd), "<m>.nowino" with Winograd off; stock TVM too.
# Built here with
#   V=""; for m in resnet18 resnet50 dla34; do V="$V --variant ${m}.h200plan:corpus:$m:fusion_profile=nvidia-h200 \
#     --variant ${m}.nowino:corpus:$m:winograd=off"; done
#   tvm-fusion-hw bundle --out .bundle_h100w --profile nvidia-h100-sxm --models corpus:resnet18 corpus:resnet50 \
#     corpus:dla34 --batches 1 --no-graph $V
# carry .bundle_h100w. 20 repeats, then each kernel timed alone (--kernel-profile).
export PYTHONUNBUFFERED=1
B=.bundle_h100w
[ -d $B/tvm_runtime ] || tar -C $B -xJf $B/rt.tar.xz
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 400 python3 $B/run.py --out /tmp/h100w --batches 1 --no-graph --no-torch --repeat 20 --min-repeat-ms 5 \
  --onnxruntime --kernel-profile --time-budget 300 > $R/run.log 2>&1; echo "rc=$?" >> $R/run.log
cp /tmp/h100w/results.json /tmp/h100w/*.md $R/ 2>/dev/null
ls /tmp/h100w >> $R/run.log
