#!/bin/bash
# device call 3: RowReduction's GEMVs at batch 1, and racecheck of the six forms corpus-8 left.
# Built here (call dir assembled with ../2026-12-02-h200-corpus-6/assemble.sh .bundle_c9 \
#   .bundle_gemv_before .bundle_gemv_after .bundle_sangemv .bundle_sanform .bundle_sank5):
#   gemv_before: main at faa365b (GEMVs on dlight), gemv_after: bed37e6 (RowReduction takes them);
#     tvm-fusion-hw bundle --out .bundle_gemv_X --batches 1 --models <the 10 corpus models whose
#     batch-1 GEMVs moved: regnet_y_400mf mobilenet_v3_large mobilenet_v3_small efficientnet_b0
#     efficientnet_v2_s maxvit_t lraspp_mobilenet_v3_large deeplabv3_mobilenet_v3_large ghostnet_100 dla34>
#   sangemv: python bench/sanitize_kernels.py --out .bundle_sangemv --batches 1 --rules RowReduction --models <the 10>
#   sanform: python bench/sanitize_kernels.py --out .bundle_sanform --batches 1 --forms-of \
#     .bundle_san32b/manifest.json k0002_... k0003_... k0004_... k0581_... k0702_...  (their batch-32 tiles at batch 1)
#   sank5:   the same with --batches 32 and k0005_... (VGG-11's conv2d6+pool, fused only at batch 32)
# 1. the 10 models, before then after, model by model (same clocks), 10 repeats, onnxruntime check;
# 2. then memcheck and racecheck of every RowReduction kernel of the 10 models (3 processes each),
#    and racecheck of the six forms, one process each, all in parallel until 340 s from the start.
export PYTHONUNBUFFERED=1
cd .bundle_c9
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in gemv_before gemv_after; do cp -r rt/* $b/; done
for b in sangemv sanform sank5; do cp -r rt/tvm_runtime rt/wheels $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu3.txt
for m in regnet_y_400mf mobilenet_v3_large mobilenet_v3_small efficientnet_b0 efficientnet_v2_s maxvit_t \
         lraspp_mobilenet_v3_large deeplabv3_mobilenet_v3_large ghostnet_100 dla34; do
  for b in gemv_before gemv_after; do
    timeout 60 python3 $b/run.py --out out_${b}/$m --models corpus:$m --repeat 10 --min-repeat-ms 5 \
      --onnxruntime --no-torch --no-isolate --kernel-profile > log_${b}_$m.log 2>&1; echo "rc=$?" >> log_${b}_$m.log
  done
done
echo "benchmark done $(( $(date +%s) - T0 ))s"
mkdir -p san
san() { # name bundle tool seconds args...
  local name=$1 b=$2 tool=$3 secs=$4; shift 4
  timeout $secs compute-sanitizer --tool $tool --error-exitcode 1 python3 $b/run_kernels.py --results san/$name.json \
    "$@" > san/$name.log 2>&1; echo "rc=$?" >> san/$name.log
}
left=$(( 340 - ($(date +%s) - T0) ))
[ $left -lt 60 ] && left=60  # as run, the benchmark took 388 s and timeout got -48: no sanitizer ran (call4.sh did it)
python3 - <<'PY'
import json
names = sorted(json.load(open("sangemv/manifest.json"))["kernels"])
for i in range(3):
    open(f"san/gemv{i}.txt", "w").write(" ".join(names[i::3]))
PY
for i in 0 1 2; do
  san gemv_mem$i sangemv memcheck $left --kernel-timeout 120 --kernels $(cat san/gemv$i.txt) &
  san gemv_race$i sangemv racecheck $left --kernel-timeout 120 --kernels $(cat san/gemv$i.txt) &
done
for k in $(python3 -c "import json; print(' '.join(json.load(open('sanform/manifest.json'))['kernels']))"); do
  san race_$k sanform racecheck $left --kernel-timeout $left --kernels $k &
done
san race_k5 sank5 racecheck $left --kernel-timeout $left &
wait
echo "sanitizer done $(( $(date +%s) - T0 ))s"
for f in san/*.log; do echo "== $f"; tail -n 4 $f; done
tar czf $OUT/c9.tgz log_* out_gemv_before out_gemv_after san
