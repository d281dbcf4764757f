#!/bin/bash
# device call 3 (stop 26): racecheck over the 13 schedule forms call 2 did not reach (its first
# racecheck process ran out of time), same bundle (.bundle_san32b), 3 processes
export PYTHONUNBUFFERED=1
B=.bundle_san32b
mkdir -p logs
K="k0967_mean5 k1000_layer_norm1 k1004_layer_norm5 k1011_layer_norm2 k1013_layer_norm4 k1021_layer_norm k1022_softmax k1025_layer_norm1 k1026_layer_norm2 k1031_softmax k1109_reshape10 k1112_reshape k1301_fused_reshape24_batch_norm7_reshape25_reshape26_split3"
set -- $K; i=0
for k in "$@"; do echo -n "$k " >> logs/l$((i % 3)).txt; i=$((i + 1)); done
for j in 0 1 2; do
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 $B/run_kernels.py --kernel-timeout 60 \
    --kernels $(cat logs/l$j.txt) --results logs/race_rest$j.json > logs/race_rest$j.log 2>&1 &
done
wait
grep -h "ok \|FAILED\|RACECHECK SUMMARY" logs/race_rest*.log
tar czf $OUT/san3.tgz logs
