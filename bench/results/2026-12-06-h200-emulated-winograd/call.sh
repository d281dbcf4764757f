#!/bin/bash
# Device call: (1) the emulated-limits proof of the Winograd, conv -> pool and query-scale decisions
# that differ between profiles (issue 15): each differing plan timed under the other profile's limits,
# then DRAM bytes of every kernel with ncu; (2) compute-sanitizer memcheck and racecheck of the
# ImplicitGemm kernels built with layout_prologues on (transposes, reshapes and slices computed in
# the GEMM's loads). Built here with
#   python bench/emulated_limits.py plan --differences \
#     bench/results/2026-12-05-profile-differences-winograd/profile_differences.json \
#     --models corpus:resnet18 corpus:vgg11_bn corpus:deit_tiny --batches 1 32 --bundle .bundle_emuw --out .bundle_emuw
#   python bench/sanitize_kernels.py --out .bundle_sanlp --models deit_tiny gpt2 bert swin_t mixer_b16 levit_128s \
#     --batches 1 --rules ImplicitGemm --knob layout_prologues=on
# TVM's runtime travels once, as .bundle_emuw/rt.tar.xz; carry .bundle_emuw and .bundle_sanlp.
export PYTHONUNBUFFERED=1
mkdir -p /tmp/rt && tar -C /tmp/rt -xJf .bundle_emuw/rt.tar.xz
for b in .bundle_emuw .bundle_sanlp; do [ -d $b/tvm_runtime ] || cp -r /tmp/rt/tvm_runtime $b/; done
R=${OUT:-.}/res
mkdir -p $R/emu $R/san
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
SEL="--models corpus:resnet18 corpus:vgg11_bn corpus:deit_tiny --batches 1 32"
timeout 170 python3 .bundle_emuw/run.py --out /tmp/emu $SEL --no-graph --no-torch --repeat 20 > $R/emu/run.log 2>&1
echo "rc=$?" >> $R/emu/run.log
cp /tmp/emu/results.json $R/emu/
# ncu over every launch (the report finds each library's runs by its kernel sequence); deit_tiny
# only at batch 32, the batch whose plans differ; the two CSVs joined under the first one's header
NCU="ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw --print-units base"
RUN="--no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0"
timeout 150 $NCU --log-file /tmp/dram_a.csv python3 .bundle_emuw/run.py --out /tmp/ncu_a \
  --models corpus:resnet18 corpus:vgg11_bn --batches 1 32 $RUN > $R/emu/ncu_a.log 2>&1; echo "rc=$?" >> $R/emu/ncu_a.log
timeout 80 $NCU --log-file /tmp/dram_b.csv python3 .bundle_emuw/run.py --out /tmp/ncu_b \
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
# the sanitizer: 85 kernels in three shards per tool, all six processes at once
python3 -c "
import json
n=sorted(json.load(open('.bundle_sanlp/manifest.json'))['kernels'])
[open(f'/tmp/san{i}.txt','w').write(' '.join(n[i::3])) for i in range(3)]"
for i in 0 1 2; do
  for tool in memcheck racecheck; do
    (timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 python3 .bundle_sanlp/run_kernels.py \
       --kernel-timeout 100 --results /tmp/san_${tool}_$i.json --kernels $(cat /tmp/san$i.txt) \
       > /tmp/san_${tool}_$i.log 2>&1; echo rc=$? >> /tmp/san_${tool}_$i.log) &
  done
done
wait
tar -C /tmp -czf $R/san/san.tgz $(cd /tmp && ls san_*.log san_*.json 2>/dev/null)
for f in /tmp/san_*.log; do echo "== $f"; tail -n 3 $f; done
