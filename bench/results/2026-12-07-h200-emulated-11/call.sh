#!/bin/bash
# Device call: the emulated-limits proof (issue 15) for six more corpus models, each differing plan
# timed under the other profile's limits; the large-GEMM sweeps of ../2026-12-07-h200-corpus-10 and
# MobileNetV2 b32's kernel profile (issue 14); then the DRAM bytes of every kernel with ncu, model by
# model, in what time is left. Built here with
#   python bench/emulated_limits.py plan \
#     --differences bench/results/2026-12-06-profile-differences/profile_differences.json \
#     --models corpus:mobilenet_v2 corpus:bert corpus:efficientnet_b0 corpus:squeezenet1_0 \
#              corpus:mobilenet_v3_small corpus:gpt2 --batches 1 32 --max-variants 3 \
#     --bundle .bundle_emu11 --out .bundle_emu11
# assembled (../2026-12-02-h200-corpus-6/assemble.sh .bundle_callE .bundle_emu11) and packed
# (../2026-12-07-h200-corpus-10/pack_solid.sh .bundle_callE emu11; the fusion reports removed: the report
# reads them from .bundle_emu11 here); carry .bundle_callE.
set -u
export PYTHONUNBUFFERED=1
# another set of models: CALL=.bundle_callF EMU=emu12 MODELS="a b ..." KPROF= (no kernel profile);
# END_S: seconds from its start by which the ncu runs stop (default 540; less where a call runs it after other work).
# MODELS in the bundle's order (the DRAM CSVs are joined in it), the GEMM profile only where the
# call carries gemmprof.tar.xz
C=${CALL:-.bundle_callE}
EMU=${EMU:-emu11}
MODELS=${MODELS:-mobilenet_v2 bert efficientnet_b0 squeezenet1_0 mobilenet_v3_small gpt2}
KPROF=${KPROF-corpus:mobilenet_v2}
B=$C/$EMU
T0=$(date +%s)
R=${OUT:-.}/res
mkdir -p $R/emu
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv > $R/gpu.txt
tar -C $B -xJf $C/rt.tar.xz
tar -C $B -xJf $C/$EMU.libs.tar.xz && mkdir -p $B/cubin && tar -C $B/cubin -xJf $C/$EMU.cubins.tar.xz
(cd $B/cubin && ls *.bin | xargs -P 16 -n 16 xz -0)
xz -d $B/manifest.json.xz
SEL="--models $(printf 'corpus:%s ' $MODELS)--batches 1 32"
timeout ${SECS:-200} python3 $B/run.py --out /tmp/emu $SEL --no-graph --no-torch --no-isolate --repeat 10 \
  --time-budget ${BUDGET:-160} > $R/emu/run.log 2>&1
echo "rc=$?" >> $R/emu/run.log; tail -n 2 $R/emu/run.log
cp /tmp/emu/results.json /tmp/emu/results.md $R/emu/ 2>/dev/null
echo "== timed $(( $(date +%s) - T0 ))s"
# the large-GEMM sweeps and their ncu profile of ../2026-12-07-h200-corpus-10 (its gemmprof.tar.xz
# copied into this call), then MobileNetV2 b32's kernels one by one (its hw build in this bundle)
OUT=$R NOTAR=1 CALL=$C bash $(dirname $0)/../2026-12-07-h200-corpus-10/call.sh gemmprof
if [ -n "$KPROF" ]; then
  timeout 90 python3 $B/run.py --out $R/kprof --models $KPROF --batches 32 --no-graph --no-torch \
    --no-isolate --repeat 3 --kernel-profile > $R/kprof.log 2>&1; echo "rc=$?" >> $R/kprof.log
  echo "== kprof $(( $(date +%s) - T0 ))s"
fi
# DRAM bytes of every launch (the report finds each library's runs by its kernel sequence), in
# what is left of a 560 s call; ncu writes its CSV only when the application exits, so one model
# per ncu run
NCU="ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw --print-units base"
RUN="--no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0"
for m in $MODELS; do
  left=$(( ${END_S:-540} - ($(date +%s) - T0) ))
  [ $left -lt 30 ] && break
  timeout $left $NCU --log-file /tmp/dram_$m.csv python3 $B/run.py --out /tmp/ncu_$m --models corpus:$m \
    --batches 1 32 $RUN > $R/emu/ncu_$m.log 2>&1; echo "rc=$?" >> $R/emu/ncu_$m.log
  echo "== ncu $m $(( $(date +%s) - T0 ))s"
done
# joined in the bundle's model order, the order the report looks for each library's runs in
python3 - "$R/emu/dram.csv" $MODELS <<'PY'
import os, sys
out = []
for model in sys.argv[2:]:
    path = f"/tmp/dram_{model}.csv"
    if not os.path.exists(path):
        continue
    rows = [ln for ln in open(path) if ln.startswith('"')]
    out += rows if not out else rows[2:]  # the header and the units row once
open(sys.argv[1], "w").writelines(out)
PY
xz -9 $R/emu/dram.csv
echo "done $(( $(date +%s) - T0 ))s"
# the device returns at most 8 files of $OUT: everything as one archive
[ -n "${OUT:-}" ] && (cd $OUT && tar czf res.tgz res && rm -rf res)
