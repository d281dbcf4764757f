#!/bin/bash
# Device call (stop 29): ConvPool with overlapping pools on the H200. Built here with
#   nice -n 5 tvm-fusion-hw bundle --out .bundle_emualex --models corpus:alexnet --batches 32 --profile nvidia-h200 \
#     --no-graph --variant alexnet.fa100_lh200:corpus:alexnet:fusion_profile=nvidia-a100-80gb,limits=nvidia-h200 \
#     --variant alexnet.fa100_la100:corpus:alexnet:fusion_profile=nvidia-a100-80gb,limits=nvidia-a100-80gb \
#     --variant alexnet.fh200_la100:corpus:alexnet:fusion_profile=nvidia-h200,limits=nvidia-a100-80gb
#   (the builds `bench/emulated_limits.py plan --models corpus:alexnet --batches 32` names)
#   nice -n 5 tvm-fusion-hw bundle --out .bundle_sanpool --models corpus:alexnet corpus:squeezenet1_0 corpus:inception_v3 \
#     --batches 1 --profile nvidia-h200 --no-graph --variant "fuse_alexnet:corpus:alexnet:pair_cost=false,max_occupancy_drop=0.99" \
#     --variant "fuse_squeezenet:corpus:squeezenet1_0:pair_cost=false,max_occupancy_drop=0.99" \
#     --variant "fuse_inception:corpus:inception_v3:pair_cost=false,max_occupancy_drop=0.99"
# (.bundle_sanpool travels without tvm_runtime/wheels: copied from .bundle_emualex here.)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p res
[ -d .bundle_sanpool/tvm_runtime ] || cp -r .bundle_emualex/tvm_runtime .bundle_emualex/wheels .bundle_sanpool/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > res/gpu.txt
# 1. AlexNet b32: P's plan against Q's plan under P's limits (emulated_limits.py's builds)
timeout 150 python3 .bundle_emualex/run.py --out res/emu --models corpus:alexnet --batches 32 --no-graph --no-torch \
  --repeat 20 --kernel-profile --no-isolate > res/emu.log 2>&1; echo "rc=$?" >> res/emu.log
echo "emu done $(( $(date +%s) - T0 ))s"
# 2. batch 1: every conv -> pool pair fused (the forced variants) against the policy's plan, kernel by kernel
timeout 150 python3 .bundle_sanpool/run.py --out res/b1 --batches 1 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > res/b1.log 2>&1; echo "rc=$?" >> res/b1.log
echo "b1 done $(( $(date +%s) - T0 ))s"
# 3. DRAM bytes of each AlexNet b32 plan (ncu, cold caches)
mkdir -p res/ncu
timeout 120 ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw \
  --print-units base --log-file res/ncu/dram.csv python3 .bundle_emualex/run.py --out res/ncu --models corpus:alexnet \
  --batches 32 --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > res/ncu.log 2>&1
echo "rc=$?" >> res/ncu.log; echo "ncu done $(( $(date +%s) - T0 ))s"
# 4. the fused kernels under compute-sanitizer (whole batch-1 models: every library of the bundle)
san() { # name tool models
  timeout $4 compute-sanitizer --tool $2 --print-limit 20 --error-exitcode 1 python3 .bundle_sanpool/run.py \
    --out res/san_$1 --models $3 --batches 1 --no-graph --no-torch --no-isolate --repeat 1 --number 1 \
    --min-repeat-ms 0 > res/san_$1.log 2>&1; echo "rc=$?" >> res/san_$1.log
}
left=$(( 560 - ($(date +%s) - T0) ))
san mem memcheck "corpus:alexnet corpus:squeezenet1_0 corpus:inception_v3" $left &
san race racecheck "corpus:alexnet corpus:squeezenet1_0" $left &
wait
echo "sanitizers done $(( $(date +%s) - T0 ))s"
for f in res/san_*.log; do echo "== $f"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard" $f | sort | uniq -c | head -5; tail -n 2 $f; done
grep -h "ms, rel\|against" res/emu.log res/b1.log | head -40
tar czf $OUT/res.tgz res
echo "all done $(( $(date +%s) - T0 ))s"
