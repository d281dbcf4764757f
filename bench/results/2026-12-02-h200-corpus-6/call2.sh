#!/bin/bash
# device call 2 (stop 22): the proof by emulated limits (issue 15: MNASNet, VGG-11, LLaMA, P's
# plan against Q's under P's limits, per-kernel times, then ncu's DRAM bytes), the seed's four
# case studies (time, per-kernel times, ncu's DRAM bytes), and the corpus models whose kernels
# the new default rules change (TiledTranspose, element-wise kernels with several outputs) at
# batch 1 and 32 against stock and onnxruntime
export PYTHONUNBUFFERED=1
cd .bundle_c2
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in emu cases val; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu2.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 2 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
NCU="ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw --print-units base"
step emu 140 python3 emu/run.py --out out_emu --no-graph --no-torch --repeat 20 --min-repeat-ms 5 --no-isolate --kernel-profile
step cases 60 python3 cases/run.py --out out_cases --no-graph --no-torch --repeat 20 --min-repeat-ms 5 --no-isolate --kernel-profile
step val 160 python3 val/run.py --out out_val --repeat 5 --min-repeat-ms 5 --onnxruntime --no-torch --no-isolate --time-budget 140
mkdir -p out_emu_ncu out_cases_ncu
step emu_ncu 130 $NCU --log-file out_emu_ncu/dram.csv python3 emu/run.py --out out_emu_ncu --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0
step cases_ncu 50 $NCU --log-file out_cases_ncu/dram.csv python3 cases/run.py --out out_cases_ncu --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0
echo "done $(( $(date +%s) - T0 ))s"
