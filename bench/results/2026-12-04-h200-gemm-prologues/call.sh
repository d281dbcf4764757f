#!/bin/bash
# Device call (2026-12-04, second session): GEMM prologues (an SE block's scale computed in the
# projecting conv's loads; proposed after the chains, commit d05eb3b) against the same models with
# gemm_prologues=false, batch 1 and 32, per-kernel times, onnxruntime checks, memcheck on the fused
# kernels at batch 32. Built here with
#   M="efficientnet_b0 mobilenet_v3_large regnet_y_400mf ghostnet_100 mobilenet_v3_small"
#   tvm-fusion-hw bundle --out .bundle_pro --models $(for m in $M; do echo corpus:$m; done) --batches 1 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.noprologue:corpus:$m:gemm_prologues=false; done)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
R=res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 330 python3 .bundle_pro/run.py --out $R/time --batches 1 32 --no-graph --no-torch --repeat 20 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/time.log 2>&1; echo "rc=$?" >> $R/time.log
echo "timing done $(( $(date +%s) - T0 ))s"
left=$(( 560 - ($(date +%s) - T0) ))
timeout $left compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 python3 .bundle_pro/run.py \
  --out $R/san_mem --models corpus:efficientnet_b0 corpus:ghostnet_100 --batches 32 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/san_mem.log 2>&1; echo "rc=$?" >> $R/san_mem.log
echo "memcheck done $(( $(date +%s) - T0 ))s"
grep -E "ERROR SUMMARY" $R/san_mem.log | sort | uniq -c | head -3; tail -n 1 $R/san_mem.log
grep -h "ms, rel\|against" $R/time.log | head -40
rm -rf $R/*/results.png
tar czf $OUT/res.tgz $R
echo "all done $(( $(date +%s) - T0 ))s"
