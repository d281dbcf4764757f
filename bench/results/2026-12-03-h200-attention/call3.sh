#!/bin/bash
# Device call 3: the Attention tiles of ViT-B/16 b1, DeiT-T b32 and BERT b1, each alone
# (tile_sweep.py build --rule Attention --top 12 --runtime --out .bundle_attsweep CASES), and memcheck and
# racecheck of every Attention kernel of the 13 models at batch 1 (.bundle_sanattn) and of DeiT-T,
# BERT and Swin-T at batch 32 (.bundle_sanattn32), after the tile limits of a1b2c3 (rows <= queries, <= 8 a warp).
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p res/san
for b in sanattn sanattn32; do cp -r .bundle_attsweep/tvm_runtime .bundle_attsweep/wheels .bundle_$b/ 2>/dev/null; done
san() { # name bundle tool seconds
  timeout $4 compute-sanitizer --tool $3 --print-limit 20 --error-exitcode 1 python3 .bundle_$2/run_kernels.py \
    --results res/san/$1.json --kernel-timeout 200 > res/san/$1.log 2>&1; echo "rc=$?" >> res/san/$1.log
}
san mem1 sanattn memcheck 200 & san race1 sanattn racecheck 200 &
san mem32 sanattn32 memcheck 200 & san race32 sanattn32 racecheck 200 & wait
echo "sanitizers done $(( $(date +%s) - T0 ))s"
timeout 240 python3 .bundle_attsweep/tile_sweep.py run --bundle .bundle_attsweep --sweep .bundle_attsweep --out res/sweep --repeat 5
for f in res/san/*.log; do echo "== $f"; grep -E "FAILED|Invalid" $f | sort | uniq -c | head -5; tail -n 3 $f; done
tar czf $OUT/call3.tgz res
echo "all done $(( $(date +%s) - T0 ))s"
