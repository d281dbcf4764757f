#!/bin/bash
# corpus-14's device calls (README.md): OUT=$OUT CALL=.bundle_callH NCU_SE=0 GP="vwold vwnew" bash call.sh vw se gp,
# then OUT=$OUT CALL=.bundle_callI RG_S=150 bash call.sh ob rg
#  se (issue 14): GemmConfig.stage_epilogue_operands timed. $CALL/gemmprof.tar.xz holds the sweep
#    deitse (DeiT-T's qkv and fc1, ViT-B's fc1 and qkv, batch 32: the best two tiles of the default,
#    staged-epilogue, wide and wide-staged-epilogue forms), timed and its first 18 launches (DeiT-T's
#    qkv and fc1) under Nsight Compute; then four transformers end to end, hw against hw with the
#    option on ($CALL/se, packed by pack_solid.sh).
#  vw (issue 15): a lone reshape kept apart from its GEMM (a view, no kernel) timed end to end: seven
#    models whose batch-32 groups it changes, hw at 304d00b ($CALL/vwold) against hw with it ($CALL/vwnew).
#  gp (issue 15): GPT-2 batch 32's kernels one by one: before the layout-prologue calibration
#    (lpold, ../2026-12-07-h100-corpus-13's bundle), after it (vwold) and with the rule (vwnew); after vw.
#  ob (issue 14): GemmConfig.one_barrier_steps (one barrier a K step in cp.async loops) timed: the
#    sweep obsweep (in gemmprof.tar.xz), compute-sanitizer on its tiles, five models end to end (ob).
#  sencu (issue 14): se's Nsight Compute pass alone (in se unless NCU_SE=0).
#  rg (issue 15): RegNetY-400MF batch 32's DRAM bytes per kernel under each emulated-12 plan (emu12).
# $CALL/rt.tar.xz: the runtime, once (../2026-12-02-h200-corpus-6/assemble.sh). Build commands: README.md.
set -u
export PYTHONUNBUFFERED=1
C=${CALL:-.bundle_callH}
D=$(dirname $(realpath $0))
R=${OUT:-.}/res; RES=$R
T0=$(date +%s)
since() { echo $(( $(date +%s) - T0 )); }
mkdir -p $R rt && tar -C rt -xJf $C/rt.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv > $R/gpu.txt
unpack() {  # a bundle packed by pack_solid.sh, with the runtime copied in
  local b=$C/$1
  cp -r rt/* $b/
  tar -C $b -xJf $C/$1.libs.tar.xz && mkdir -p $b/cubin && tar -C $b/cubin -xJf $C/$1.cubins.tar.xz
  (cd $b/cubin && ls *.bin | xargs -P 16 -n 16 xz -0)
  [ -f $b/manifest.json.xz ] && xz -d $b/manifest.json.xz
}
NCU_GEMM="ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats --section InstructionStats \
  --metrics smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__cycles_elapsed.avg.per_second \
  --csv --page raw --print-units base"

sencu() {  # deitse's first 18 launches (DeiT-T's qkv and fc1 tiles) under Nsight Compute
  local R=$RES/se; mkdir -p $R
  g=$C/gemmprof
  [ -d $g/deitse/tvm_runtime ] || { mkdir -p $g && tar -C $g -xJf $C/gemmprof.tar.xz && cp -r rt/* $g/deitse/; }
  timeout 130 $NCU_GEMM -c 18 --log-file $R/ncu_deitse.csv \
    python3 $g/deitse/tile_sweep.py run --bundle $g/deitse --sweep $g/deitse --out /tmp/once --once > $R/ncu_deitse.log 2>&1
  echo "rc=$?" >> $R/ncu_deitse.log; echo "== ncu deitse $(since)s"
  xz -9 $R/ncu_deitse.csv
}

se() {
  local R=$RES/se; mkdir -p $R
  g=$C/gemmprof; mkdir -p $g && tar -C $g -xJf $C/gemmprof.tar.xz
  cp -r rt/* $g/deitse/
  timeout 100 python3 $g/deitse/tile_sweep.py run --bundle $g/deitse --sweep $g/deitse --out $R/deitse --repeat 10 \
    > $R/deitse.log 2>&1; echo "rc=$?" >> $R/deitse.log; tail -n 1 $R/deitse.log
  echo "== deitse $(since)s"
  [ "${NCU_SE:-1}" = 1 ] && sencu  # NCU_SE=0: no Nsight Compute pass (a call short of time)
  unpack se
  timeout 115 python3 $C/se/run.py --out /tmp/o_se --repeat 7 --min-repeat-ms 5 --no-torch --no-graph \
    --no-isolate --time-budget 100 > $R/se.log 2>&1; echo "rc=$?" >> $R/se.log
  cp /tmp/o_se/results.json $R/se.json 2>/dev/null; tail -n 1 $R/se.log
}

vw() {  # hw at 304d00b and with the lone-reshape rule, seven models whose groups it changes
  local R=$RES/vw; mkdir -p $R
  for b in vwold vwnew; do unpack $b; done
  for b in vwold vwnew; do
    timeout 100 python3 $C/$b/run.py --out /tmp/o_$b --repeat 7 --min-repeat-ms 5 --no-torch --no-graph \
      --no-isolate --time-budget 85 > $R/$b.log 2>&1; echo "rc=$?" >> $R/$b.log
    cp /tmp/o_$b/results.json $R/$b.json 2>/dev/null; tail -n 1 $R/$b.log; echo "== vw $b $(since)s"
  done
}

gp() {  # GPT-2 batch 32's kernels one by one: before the calibration (lpold), at 304d00b (vwold), with the rule (vwnew)
  local R=$RES/gp; mkdir -p $R
  for b in ${GP:-lpold vwold vwnew}; do  # GP: the bundles to profile
    [ -d $C/$b/tvm_runtime ] || unpack $b
    timeout 45 python3 $C/$b/run.py --out $R/$b --models corpus:gpt2 --batches 32 --no-graph --no-torch \
      --no-isolate --repeat 7 --kernel-profile > $R/$b.log 2>&1; echo "rc=$?" >> $R/$b.log
    tail -n 1 $R/$b.log; echo "== gp $b $(since)s"
  done
}

rg() {  # ncu writes its CSV only when the application exits: one run
  local R=$RES/rg; mkdir -p $R
  unpack emu12
  timeout ${RG_S:-200} ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw \
    --print-units base --log-file $R/dram.csv python3 $C/emu12/run.py --out /tmp/ncu_rg --models corpus:regnet_y_400mf \
    --batches 32 --no-graph --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/ncu_rg.log 2>&1
  echo "rc=$?" >> $R/ncu_rg.log; tail -n 1 $R/ncu_rg.log; echo "== rg $(since)s"
  xz -9 $R/dram.csv
}

ob() {  # GemmConfig.one_barrier_steps: the sweep obsweep timed, its tiles under racecheck and memcheck
  # (each launched once), then five models end to end, hw against hw with the option ($CALL/ob)
  local R=$RES/ob; mkdir -p $R
  g=$C/gemmprof; mkdir -p $g; [ -d $g/obsweep ] || tar -C $g -xJf $C/gemmprof.tar.xz
  cp -r rt/* $g/obsweep/
  timeout 100 python3 $g/obsweep/tile_sweep.py run --bundle $g/obsweep --sweep $g/obsweep --out $R/obsweep --repeat 10 \
    > $R/obsweep.log 2>&1; echo "rc=$?" >> $R/obsweep.log; tail -n 1 $R/obsweep.log; echo "== obsweep $(since)s"
  # the sanitizers on the one-barrier tiles alone (and dlight's reference): the sweep's folder linked,
  # its sweep.json cut to them
  local s=$g/obsan; rm -rf $s; cp -rs $(realpath $g/obsweep) $s; rm $s/sweep.json
  python3 -c "import json; d = json.load(open('$g/obsweep/sweep.json'))
for c in d['cases']: c['variants'] = [v for v in c['variants'] if v['name'] == 'dlight' or 'one-barrier' in v['name']]
json.dump(d, open('$s/sweep.json', 'w'))"
  for tool in racecheck memcheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 python3 $g/obsweep/tile_sweep.py run --bundle $g/obsweep \
      --sweep $s --out /tmp/san --once > $R/$tool.log 2>&1; echo "rc=$?" >> $R/$tool.log; tail -n 3 $R/$tool.log
    echo "== $tool $(since)s"
  done
  unpack ob
  timeout 150 python3 $C/ob/run.py --out /tmp/o_ob --repeat 7 --min-repeat-ms 5 --no-torch --no-graph \
    --no-isolate --time-budget 135 > $R/ob.log 2>&1; echo "rc=$?" >> $R/ob.log
  cp /tmp/o_ob/results.json $R/ob.json 2>/dev/null; tail -n 1 $R/ob.log
}

for what in "$@"; do $what; echo "== $what end $(since)s"; done
[ -n "${OUT:-}" ] && (cd $OUT && tar czf res.tgz res && rm -rf res)
echo "done $(since)s"
