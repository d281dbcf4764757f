#!/bin/bash
# Device call 3 (stop 29): GoogLeNet's ceil-mode pools after the overhang moved into the conv (commit after
# call 2: no predicated FMAs). Built here with
#   tvm-fusion-hw bundle --out .bundle_emugl --models corpus:googlenet --batches 32 --profile nvidia-h200 --no-graph \
#     --variant googlenet.f4090_lh200:corpus:googlenet:fusion_profile=nvidia-rtx-4090,limits=nvidia-h200 \
#     --variant googlenet.f4090_l4090:corpus:googlenet:fusion_profile=nvidia-rtx-4090,limits=nvidia-rtx-4090 \
#     --variant googlenet.fh200_l4090:corpus:googlenet:fusion_profile=nvidia-h200,limits=nvidia-rtx-4090
#   tvm-fusion-hw bundle --out .bundle_sangl --models corpus:googlenet corpus:squeezenet1_0 --batches 1 \
#     --profile nvidia-h200 --no-graph --variant "fuse_googlenet:corpus:googlenet:pair_cost=false,max_occupancy_drop=0.99" \
#     --variant "fuse_squeezenet:corpus:squeezenet1_0:pair_cost=false,max_occupancy_drop=0.99"
# (.bundle_sangl travels without tvm_runtime/wheels: copied from .bundle_emugl here.)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p res3
[ -d .bundle_sangl/tvm_runtime ] || cp -r .bundle_emugl/tvm_runtime .bundle_emugl/wheels .bundle_sangl/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > res3/gpu.txt
timeout 100 python3 .bundle_emugl/run.py --out res3/emu --batches 32 --no-graph --no-torch --repeat 20 \
  --kernel-profile --no-isolate > res3/emu.log 2>&1; echo "rc=$?" >> res3/emu.log
echo "emu done $(( $(date +%s) - T0 ))s"
timeout 60 python3 .bundle_sangl/run.py --out res3/b1 --batches 1 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > res3/b1.log 2>&1; echo "rc=$?" >> res3/b1.log
echo "b1 done $(( $(date +%s) - T0 ))s"
san() { # name tool models seconds
  timeout $4 compute-sanitizer --tool $2 --print-limit 20 --error-exitcode 1 python3 .bundle_sangl/run.py \
    --out res3/san_$1 --models $3 --batches 1 --no-graph --no-torch --no-isolate --repeat 1 --number 1 \
    --min-repeat-ms 0 > res3/san_$1.log 2>&1; echo "rc=$?" >> res3/san_$1.log
}
san race racecheck corpus:googlenet 260 &
san mem memcheck "corpus:googlenet corpus:squeezenet1_0" 260 &
wait
echo "sanitizers done $(( $(date +%s) - T0 ))s"
mkdir -p res3/ncu
left=$(( 540 - ($(date +%s) - T0) ))
timeout $left ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw \
  --print-units base --log-file res3/ncu/dram.csv python3 .bundle_emugl/run.py --out res3/ncu --batches 32 \
  --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > res3/ncu.log 2>&1
echo "rc=$?" >> res3/ncu.log; echo "ncu done $(( $(date +%s) - T0 ))s"
for f in res3/san_*.log; do echo "== $f"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Race reported" $f | sort | uniq -c | head -3; tail -n 1 $f; done
grep -h "ms, rel\|against" res3/emu.log res3/b1.log | head -20
rm -rf res3/*/results.png
tar czf $OUT/res3.tgz res3
echo "all done $(( $(date +%s) - T0 ))s"
