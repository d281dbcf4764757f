#!/bin/bash
# Device call: (1) the emulated-limits proof of the Winograd, conv -> pool and query-scale decisions
# that differ between profiles (issue 15): each differing plan timed under the other profile's limits,
# then DRAM bytes of every kernel with ncu (ResNet-18 b1 and DeiT-T b32 only: device time). The
# layout-prologue sanitizer ran in ../2026-12-05-h200-layout-prologues/call.sh instead. Built here with
#   python bench/emulated_limits.py plan --differences \
#     bench/results/2026-12-05-profile-differences-winograd/profile_differences.json \
#     --models corpus:resnet18 corpus:vgg11_bn corpus:deit_tiny --batches 1 32 --bundle .bundle_emuw --out .bundle_emuw
# carry .bundle_emuw (TVM's runtime in it as rt.tar.xz).
export PYTHONUNBUFFERED=1
mkdir -p /tmp/rt && tar -C /tmp/rt -xJf .bundle_emuw/rt.tar.xz
[ -d .bundle_emuw/tvm_runtime ] || cp -r /tmp/rt/tvm_runtime .bundle_emuw/
R=${OUT:-.}/res
mkdir -p $R/emu
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
SEL="--models corpus:resnet18 corpus:vgg11_bn corpus:deit_tiny --batches 1 32"
timeout 150 python3 .bundle_emuw/run.py --out /tmp/emu $SEL --no-graph --no-torch --repeat 10 --time-budget 120 > $R/emu/run.log 2>&1
echo "rc=$?" >> $R/emu/run.log
cp /tmp/emu/results.json $R/emu/
# ncu over every launch (the report finds each library's runs by its kernel sequence); deit_tiny
# only at batch 32, the batch whose plans differ; the two CSVs joined under the first one's header
NCU="ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw --print-units base"
RUN="--no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0"
timeout 110 $NCU --log-file /tmp/dram_a.csv python3 .bundle_emuw/run.py --out /tmp/ncu_a \
  --models corpus:resnet18 --batches 1 $RUN > $R/emu/ncu_a.log 2>&1; echo "rc=$?" >> $R/emu/ncu_a.log
timeout 60 $NCU --log-file /tmp/dram_b.csv python3 .bundle_emuw/run.py --out /tmp/ncu_b \
  --models corpus:deit_tiny --batches 32 $RUN > $R/emu/ncu_b.log 2>&1; echo "rc=$?" >> $R/emu/ncu_b.log
python3 - "$R/emu/dram.csv" <<'EOF'
import sys
out = []
for i, path in enumerate(("/tmp/dram_a.csv", "/tmp/dram_b.csv")):
    try:
        rows = [ln for ln in open(path) if ln.startswith('"')]
    except OSError:
        continue
    out += rows if not out else rows[2:]  # the header and the units row once
open(sys.argv[1], "w").writelines(out)
EOF
xz -9 $R/emu/dram.csv
