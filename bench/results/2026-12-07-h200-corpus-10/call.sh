#!/bin/bash
# Device calls of corpus-10: the whole corpus at batch 32 (two halves, one call each) and at batch 1
# (one call, then a GEMM tile sweep of batch-1 convolutions), built here at d7f3a40 with
#   tvm-fusion-hw bundle --out .bundle_b32A --models <corpus.names()[0::2], as corpus:NAME> --batches 32
#   tvm-fusion-hw bundle --out .bundle_b32B --models <corpus.names()[1::2]> --batches 32
#   the same with --batches 1 into .bundle_b1A and .bundle_b1B
#   python bench/tile_sweep.py build --out .bundle_swn --runtime --top 6 $CASES          (the model's ranking)
#   python bench/tile_sweep.py build --out .bundle_swl --runtime --top 6 --configs long-steps $CASES
#     CASES: the batch-1 kernels of ResNet-50, Inception-v3 and ConvNeXt-T listed in sweep_cases.txt,
#     whose first-ranked tile changes with GemmConfig.long_step_slowdown=0.3
# slimmed with ../2026-12-02-h200-corpus-6/assemble.sh .bundle_call <bundles of the call> (the runtime
# compressed once, rt.tar.xz), each bundle's libraries and cubins then packed by pack_solid.sh; the
# sweeps' libraries, cubins and sweep.json (each build folder without tvm_runtime, wheels, builders)
# in the b32A call's sweeps.tar.xz; for b1 the two halves merged into one bundle first
# (merge_bundles.py .bundle_b1A .bundle_b1B .bundle_b1: one entry list, one run).
# Usage: call.sh b32A | call.sh b32B | call.sh b1 | call.sh b1t (batch 1 with torch); for b32A, MODELS="corpus:A ..." SECS=S BUDGET=S
# narrow it (the run's timeout and the runner's --time-budget)
# Every row against onnxruntime; at batch 32 torch.compile + CUDA graphs timed in the same process.
set -u
export PYTHONUNBUFFERED=1
what=${1:?b32A, b32B, b1, sweeps, gemmprof or short}
C=${CALL:-.bundle_call}  # the assembled bundles (CALL=.bundle_callB: another folder)
T0=$(date +%s)
R=${OUT:-.}/$what
mkdir -p $R rt && tar -C rt -xJf $C/rt.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv > $R/gpu.txt
unpack() { # bundle: the runtime copied in, once
  local b=$1
  [ -f $C/$b/manifest.json ] && return 0
  cp -r rt/* $C/$b/
  if [ -f $C/$b.libs.tar.xz ]; then  # packed by pack_solid.sh: plain .so files (the runner takes them), cubins .xz again
    tar -C $C/$b -xJf $C/$b.libs.tar.xz && mkdir -p $C/$b/cubin && tar -C $C/$b/cubin -xJf $C/$b.cubins.tar.xz
    (cd $C/$b/cubin && ls *.bin | xargs -P 16 -n 16 xz -0)
    xz -d $C/$b/manifest.json.xz
  fi
  # the fusion reports, packed by pack_solid.sh
  [ -f $C/$b.reports.tar.xz ] && tar -C $C/$b -xJf $C/$b.reports.tar.xz
  return 0
}
run() { # bundle seconds budget torch-flags...
  local b=$1 secs=$2 budget=$3; shift 3
  unpack $b
  echo "== $b start $(( $(date +%s) - T0 ))s"
  timeout $secs python3 $C/$b/run.py --out /tmp/out_$b --repeat 5 --min-repeat-ms 5 --onnxruntime \
    "$@" --no-isolate --time-budget $budget > $R/$b.log 2>&1
  echo "rc=$?" >> $R/$b.log
  cp /tmp/out_$b/results.json $R/$b.json 2>/dev/null; cp /tmp/out_$b/results.md $R/$b.md 2>/dev/null
  tail -n 2 $R/$b.log
  echo "== $b end $(( $(date +%s) - T0 ))s"
}
sweeps() {  # the GEMM tile sweeps, where this call carries them
  [ -f $C/sweeps.tar.xz ] || return 0
  tar -C $C -xJf $C/sweeps.tar.xz
  for s in swn swl; do
    cp -r rt/* $C/$s/
    timeout 150 python3 $C/$s/tile_sweep.py run --bundle $C/$s --sweep $C/$s --out $R/$s \
      > $R/$s.log 2>&1; echo "rc=$?" >> $R/$s.log; tail -n 1 $R/$s.log
  done
}
gemmprof() {  # GEMM tile sweeps, each folder of gemmprof.tar.xz timed (here: cfg, four large GEMMs
  # under each GemmConfig form; n768, ViT's N = 768 GEMMs with the model's top tiles and neighbours;
  # another call's archive may hold others), then cfg's tiles launched once each under ncu
  [ -f $C/gemmprof.tar.xz ] || return 0
  local g=$C/gemmprof; mkdir -p $g $R/gemmprof && tar -C $g -xJf $C/gemmprof.tar.xz
  for s in $(cd $g && ls -d */ | tr -d /); do
    local left=$(( 560 - ($(date +%s) - T0) ))  # each sweep within the call's 600 s
    [ $left -lt 20 ] && break
    cp -r rt/* $g/$s/
    local cap=${SWEEP_S:-150}  # SWEEP_S: seconds a sweep may take at most
    timeout $(( left < cap ? left : cap )) python3 $g/$s/tile_sweep.py run --bundle $g/$s --sweep $g/$s --out $R/gemmprof/$s --repeat 10 \
      > $R/gemmprof/$s.log 2>&1; echo "rc=$?" >> $R/gemmprof/$s.log; tail -n 1 $R/gemmprof/$s.log
  done
  if [ -d $g/cfg ]; then
    timeout 150 ncu --target-processes all --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section LaunchStats --section InstructionStats --csv --page raw --print-units base \
      --log-file $R/gemmprof/ncu.csv \
      python3 bench/tile_sweep.py run --bundle $g/cfg --sweep $g/cfg --out /tmp/once --once > $R/gemmprof/ncu.log 2>&1
    echo "rc=$?" >> $R/gemmprof/ncu.log; tail -n 1 $R/gemmprof/ncu.log; xz -9 $R/gemmprof/ncu.csv
  fi
  echo "== gemmprof end $(( $(date +%s) - T0 ))s"
}
kprof() {  # each kernel of MobileNetV2 and ViT-B/16 (KPROF_MODELS: others of the b32A half) at batch 32 timed alone
  local left=$(( 530 - ($(date +%s) - T0) ))
  [ $left -lt 40 ] && return 0
  unpack b32A
  timeout $left python3 $C/b32A/run.py --out $R/kprof --models ${KPROF_MODELS:-corpus:mobilenet_v2 corpus:vit_b_16} --batches 32 \
    --no-torch --no-graph --no-isolate --repeat 3 --kernel-profile > $R/kprof.log 2>&1
  echo "rc=$?" >> $R/kprof.log; tail -n 1 $R/kprof.log
  echo "== kprof end $(( $(date +%s) - T0 ))s"
}
torchk() {  # PyTorch's kernels op by op (bench/torch_kernels.py) for TK_MODELS at batch 32, where time is left
  local left=$(( 560 - ($(date +%s) - T0) ))
  [ -z "${TK_MODELS:-}" ] || [ $left -lt 30 ] && return 0
  timeout $left python3 bench/torch_kernels.py --models $TK_MODELS --batch 32 --out $R/torchk > $R/torchk.log 2>&1
  echo "rc=$?" >> $R/torchk.log; tail -n 2 $R/torchk.log
}
case $what in
  b32A) left=$(( 485 - ($(date +%s) - T0) ))  # the corpus half first; 60 s kept for what follows
    run b32A ${SECS:-$left} ${BUDGET:-$(( left - 60 ))} ${MODELS:+--models $MODELS} --torch compile_graphs --torch-warm 15
    # then, where the half leaves time: the tile sweeps this call carries (since 2026-12-07's third
    # session: MobileNetV2's batch-32 1x1 convolutions and DeiT-T's batch-32 GEMMs, gemmprof.tar.xz's
    # mbv2pw and deitg), and MobileNetV2's
    # and ViT's kernels one by one
    [ -z "${NOGEMM:-}" ] && [ $(( $(date +%s) - T0 )) -lt 420 ] && gemmprof
    [ -z "${NOKPROF:-}" ] && kprof  # NOKPROF=1: the half alone (its sweeps ran in their own call)
    torchk
    [ $(( $(date +%s) - T0 )) -lt 420 ] && sweeps ;;
  gemmprof) gemmprof ;;
  short) gemmprof; kprof ;;  # where the session's device time no longer holds the whole b32A call
  sweeps) sweeps ;;
  b32B) run b32B ${SECS:-470} ${BUDGET:-400} --torch compile_graphs --torch-warm 15
    [ -z "${NOGEMM:-}" ] && [ $(( $(date +%s) - T0 )) -lt 480 ] && gemmprof  # the sweeps this call carries
    torchk ;;
  b1) run b1 420 330 --no-torch ;;  # PyTorch left out: the device time went to refused starts
  b1t) run ${BUNDLE:-b1} ${SECS:-550} ${BUDGET:-470} ${MODELS:+--models $MODELS} --torch compile_graphs --torch-warm 15 ;;  # batch 1 with
    # torch.compile + CUDA graphs, as far as the budget goes (MODELS: a part of the corpus)
esac
echo "done $(( $(date +%s) - T0 ))s"
# the device returns at most 8 files of $OUT: everything as one archive (where $OUT is the call's)
[ -n "${OUT:-}" ] && [ -z "${NOTAR:-}" ] && (cd $OUT && tar czf $what.tgz $what && rm -rf $what)
