#!/bin/bash
# corpus-13's device calls. Usage: OUT=$OUT CALL=.bundle_callD bash call.sh gemm|lp|emu ...
#  gemm (issue 14): DeiT-T's batch-32 linear layers, ours against cuBLAS, timed and under Nsight
#    Compute; $CALL/gemmprof.tar.xz holds the sweeps deita (qkv and fc1: the model's pick, its
#    neighbours, and the pick changed to cp.async with 2-3 buffers, BK 16, 8 x 8 and cuBLAS's
#    128 x 128 tile of 8 x 16 a thread) and deitw (qkv under the default and wide GemmConfig forms),
#    and deitqk (attention's Q.K^T and P.V with their layout prologues: the top tiles and their
#    neighbours), each folder without tvm_runtime and wheels.
#  lp (issue 15): the layout-prologue calibration (1223bf4) end to end, corpus-12's call2.sh first
#    half: $CALL/lpnew and $CALL/lpold, packed by pack_solid.sh.
#  emu (issue 15): emulated-12's six models under each other's limits, $CALL/emu12.
# $CALL/rt.tar.xz: the runtime, once (../2026-12-02-h200-corpus-6/assemble.sh). Build commands: README.md.
set -u
export PYTHONUNBUFFERED=1
C=${CALL:-.bundle_callD}
D=$(dirname $0)
R=${OUT:-.}/res
T0=$(date +%s)
since() { echo $(( $(date +%s) - T0 )); }
mkdir -p $R rt && tar -C rt -xJf $C/rt.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv > $R/gpu.txt

gemm() {
  local R=$R/gemm; mkdir -p $R
  g=$C/gemmprof; mkdir -p $g && tar -C $g -xJf $C/gemmprof.tar.xz
  # DeiT-T's four linear layers at batch 32 (qkv, fc1, fc2, proj), as nn.Linear runs them
  SHAPES="6304x576x192 6304x768x192 6304x192x768 6304x192x192"
  timeout 60 python3 $D/torch_gemm.py --shapes $SHAPES --sdpa 32x3x197x64 32x12x197x64 --out $R/torch_gemm.json > $R/torch_gemm.log 2>&1
  echo "rc=$?" >> $R/torch_gemm.log; cat $R/torch_gemm.log
  for s in deita deitw deitqk; do
    cp -r rt/* $g/$s/
    timeout 120 python3 $g/$s/tile_sweep.py run --bundle $g/$s --sweep $g/$s --out $R/$s --repeat 10 \
      > $R/$s.log 2>&1; echo "rc=$?" >> $R/$s.log; tail -n 1 $R/$s.log
    echo "== $s $(since)s"
  done
  # where each kernel's time goes: ours (deita, deitqk: every tile launched once) and cuBLAS (one launch a
  # shape after warm-up); the raw page, read here by bench/ncu_table.py
  NCU="ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats --section InstructionStats \
    --metrics smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__cycles_elapsed.avg.per_second \
    --csv --page raw --print-units base"
  for s in $SHAPES; do
    timeout 60 $NCU -k regex:'gemm|xmma|cutlass' --launch-skip 5 --launch-count 1 --log-file $R/ncu_torch_$s.csv \
      python3 $D/torch_gemm.py --shapes $s --iters 1 > $R/ncu_torch_$s.log 2>&1; echo "rc=$?" >> $R/ncu_torch_$s.log
  done
  echo "== ncu torch $(since)s"
  # deita: its first 21 launches, the qkv GEMM's tiles (-c; ncu writes the CSV only on exit)
  for s in deita deitqk; do
    timeout 130 $NCU $([ $s = deita ] && echo -c 21) --log-file $R/ncu_$s.csv \
      python3 $g/$s/tile_sweep.py run --bundle $g/$s --sweep $g/$s --out /tmp/once_$s --once > $R/ncu_$s.log 2>&1
    echo "rc=$?" >> $R/ncu_$s.log; tail -n 1 $R/ncu_$s.log; echo "== ncu $s $(since)s"
  done
  xz -9 $R/*.csv
}

lp() {
  local R=$R/lp; mkdir -p $R
  for b in lpnew lpold; do
    cp -r rt/* $C/$b/
    tar -C $C/$b -xJf $C/$b.libs.tar.xz && mkdir -p $C/$b/cubin && tar -C $C/$b/cubin -xJf $C/$b.cubins.tar.xz
    (cd $C/$b/cubin && ls *.bin | xargs -P 16 -n 16 xz -0)
    xz -d $C/$b/manifest.json.xz
  done
  for b in lpnew lpold; do
    echo "== $b start $(since)s"
    timeout 100 python3 $C/$b/run.py --out /tmp/o_$b --repeat 7 --min-repeat-ms 5 --no-torch --no-graph \
      --no-isolate --time-budget 85 --onnxruntime > $R/$b.log 2>&1; echo "rc=$?" >> $R/$b.log
    cp /tmp/o_$b/results.json $R/$b.json 2>/dev/null; tail -n 1 $R/$b.log
  done
}

emu() {  # emulated-11's call.sh writes ./res and tars it where OUT is set: run it inside $R, OUT empty;
  # it sweeps any gemmprof.tar.xz it finds (gemm's): moved aside
  [ -f $C/gemmprof.tar.xz ] && mv $C/gemmprof.tar.xz $C/gemmprof.swept.tar.xz
  local call=$(realpath $C) script=$(realpath $D/../2026-12-07-h200-emulated-11/call.sh)
  (cd $R && OUT= CALL=$call EMU=emu12 KPROF= SECS=${SECS:-170} BUDGET=${BUDGET:-140} \
    END_S=${END_S:-540} MODELS="efficientnet_lite0 mobilenet_v3_large ghostnet_100 regnet_y_400mf distilbert timm_resnet26d" \
    bash $script)
}

for what in "$@"; do $what; echo "== $what end $(since)s"; done
[ -n "${OUT:-}" ] && (cd $OUT && tar czf res.tgz res && rm -rf res)
echo "done $(since)s"
