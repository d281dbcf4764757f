#!/bin/bash
# device call 1: GEMM sweep, fuzz seed set, corpus batch 32 (first half)
export PYTHONUNBUFFERED=1
cd .bundle_c1
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in b32A sweep; do [ -d $b ] && cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step sweep 150 python3 sweep/tile_sweep.py run --bundle sweep --sweep sweep --out out_sweep --repeat 20

step b32A 470 python3 b32A/run.py --out out_b32A --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs --torch-warm 14 --no-isolate --time-budget 400
