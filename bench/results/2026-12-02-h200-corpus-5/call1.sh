#!/bin/bash
# device call 1: the corpus at batch 32, first half, with PyTorch (eager, torch.compile + CUDA graphs)
export PYTHONUNBUFFERED=1
cd .bundle_c1
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
cp -r rt/* b32A/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu1.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step b32A 540 python3 b32A/run.py --out out_b32A --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs --torch-warm 14 --no-isolate --time-budget 470
