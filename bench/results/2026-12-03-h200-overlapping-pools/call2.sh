#!/bin/bash
# Device call 2 (stop 29): padded and ceil-mode pools (ResNet stem, GoogLeNet) with their conv on the H200.
# Built here with (emulated_limits.py plan --models corpus:resnet18 corpus:googlenet --batches 32 names the first):
#   tvm-fusion-hw bundle --out .bundle_emur18 --models corpus:resnet18 corpus:googlenet --batches 32 \
#     --profile nvidia-h200 --no-graph --variant resnet18.f4090_lh200:corpus:resnet18:fusion_profile=nvidia-rtx-4090,limits=nvidia-h200 \
#     --variant resnet18.f4090_l4090:...:fusion_profile=nvidia-rtx-4090,limits=nvidia-rtx-4090 \
#     --variant resnet18.fh200_l4090:...:fusion_profile=nvidia-h200,limits=nvidia-rtx-4090 (and the same three for googlenet)
#   tvm-fusion-hw bundle --out .bundle_sanstem --models corpus:resnet18 corpus:googlenet --batches 1 --profile nvidia-h200 \
#     --no-graph --variant "fuse_resnet18:corpus:resnet18:pair_cost=false,max_occupancy_drop=0.99" \
#     --variant "fuse_googlenet:corpus:googlenet:pair_cost=false,max_occupancy_drop=0.99"
#   .bundle_sanpool: call.sh's batch-1 bundle (for Nsight Compute on AlexNet's slow fused 5x5 kernel)
# .bundle_sanstem and .bundle_sanpool travel without tvm_runtime/wheels: copied from .bundle_emur18 here.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p res2
for b in .bundle_sanstem .bundle_sanpool; do
  [ -d $b/tvm_runtime ] || cp -r .bundle_emur18/tvm_runtime .bundle_emur18/wheels $b/
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > res2/gpu.txt
# 1. batch 32: P's plan against Q's plan under P's limits
timeout 170 python3 .bundle_emur18/run.py --out res2/emu --batches 32 --no-graph --no-torch --repeat 20 \
  --kernel-profile --no-isolate > res2/emu.log 2>&1; echo "rc=$?" >> res2/emu.log
echo "emu done $(( $(date +%s) - T0 ))s"
# 2. batch 1: every conv -> pool pair fused against the policy's plan, kernel by kernel
timeout 90 python3 .bundle_sanstem/run.py --out res2/b1 --batches 1 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > res2/b1.log 2>&1; echo "rc=$?" >> res2/b1.log
echo "b1 done $(( $(date +%s) - T0 ))s"
# 3. DRAM bytes of each batch-32 plan (ncu, cold caches)
mkdir -p res2/ncu
timeout 110 ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw \
  --print-units base --log-file res2/ncu/dram.csv python3 .bundle_emur18/run.py --out res2/ncu --batches 32 \
  --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > res2/ncu.log 2>&1
echo "rc=$?" >> res2/ncu.log; echo "ncu done $(( $(date +%s) - T0 ))s"
# 4. where AlexNet's fused 5x5 conv + 3x3/2 pool spends its 557 us (call 1)
timeout 60 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
  --section Occupancy -k regex:fused_conv2d1_add1_relu1_max_pool2d1 -c 1 python3 .bundle_sanpool/run.py --out res2/ncu5x5 \
  --models corpus:alexnet --batches 1 --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 \
  > res2/ncu5x5.log 2>&1; echo "rc=$?" >> res2/ncu5x5.log
echo "ncu 5x5 done $(( $(date +%s) - T0 ))s"
# 5. the fused kernels under compute-sanitizer (whole batch-1 models: every library of the bundle)
san() { # name tool
  timeout $3 compute-sanitizer --tool $2 --print-limit 20 --error-exitcode 1 python3 .bundle_sanstem/run.py \
    --out res2/san_$1 --batches 1 --no-graph --no-torch --no-isolate --repeat 1 --number 1 \
    --min-repeat-ms 0 > res2/san_$1.log 2>&1; echo "rc=$?" >> res2/san_$1.log
}
left=$(( 570 - ($(date +%s) - T0) ))
san mem memcheck $left & san race racecheck $left & wait
echo "sanitizers done $(( $(date +%s) - T0 ))s"
for f in res2/san_*.log; do echo "== $f"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $f | sort | uniq -c | head -3; tail -n 1 $f; done
grep -h "ms, rel\|against" res2/emu.log res2/b1.log | head -40
rm -rf res2/*/results.png
tar czf $OUT/res2.tgz res2
echo "all done $(( $(date +%s) - T0 ))s"
