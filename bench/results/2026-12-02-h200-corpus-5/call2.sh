#!/bin/bash
# device call 2: the corpus at batch 32, second half, with PyTorch
export PYTHONUNBUFFERED=1
cd .bundle_c2
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
cp -r rt/* b32B/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu2.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step b32B 500 python3 b32B/run.py --out out_b32B --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs --torch-warm 14 --no-isolate --time-budget 430
