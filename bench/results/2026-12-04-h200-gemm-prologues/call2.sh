#!/bin/bash
# Device call 4 (2026-12-04): after the computed-copy latency term in the GEMM tile model (a
# prologue tile computing more than 4 elements a thread a step without prefetch waits on its loads
# in turn): the four SE models whose fused kernels had such tiles, batch 32, hw against
# gemm_prologues=false; memcheck of GhostNet's. Built here with
#   M="ghostnet_100 mobilenet_v3_small efficientnet_b0 mobilenet_v3_large"
#   tvm-fusion-hw bundle --out .bundle_pro2 --models $(for m in $M; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.noprologue:corpus:$m:gemm_prologues=false; done)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
R=res2
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 300 python3 .bundle_pro2/run.py --out $R/time --batches 32 --no-graph --no-torch --repeat 20 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/time.log 2>&1; echo "rc=$?" >> $R/time.log
echo "timing done $(( $(date +%s) - T0 ))s"
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 python3 .bundle_pro2/run.py \
  --out $R/san_mem --models corpus:ghostnet_100 corpus:mobilenet_v3_small --batches 32 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/san_mem.log 2>&1; echo "rc=$?" >> $R/san_mem.log
grep -E "ERROR SUMMARY" $R/san_mem.log | sort | uniq -c | head -3; tail -n 1 $R/san_mem.log
grep -h "ms, rel\|against" $R/time.log | head -40
rm -rf $R/*/results.png
tar czf $OUT/res2.tgz $R
echo "all done $(( $(date +%s) - T0 ))s"
