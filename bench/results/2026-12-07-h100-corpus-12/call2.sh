#!/bin/bash
# Second device call of corpus-12: (1) the layout-prologue calibration (1223bf4) end to end: the 10
# models whose batch-32 groups it changes on the H100 profile, and PoolFormer-S12 as a control, built
# before it (.bundle_lpold, at 04efc19 in a worktree) and with it (.bundle_lpnew):
#   tvm-fusion-hw bundle --out .bundle_lp{old,new} --no-graph --profile nvidia-h100-sxm --batches 32 \
#     --models corpus:alexnet corpus:vgg11_bn corpus:convnext_tiny corpus:vit_b_16 corpus:swin_t corpus:bert \
#              corpus:distilbert corpus:roberta corpus:gpt2 corpus:bart_encoder corpus:poolformer_s12
# (2) then the emulated limits of ../2026-12-07-h200-emulated-12 (its .bundle_emu12, rebuilt at 04efc19
# by the command in its README), by ../2026-12-07-h200-emulated-11/call.sh.
# Packed: ../2026-12-02-h200-corpus-6/assemble.sh .bundle_callC .bundle_lpnew .bundle_lpold .bundle_emu12,
# then ../2026-12-07-h200-corpus-10/pack_solid.sh .bundle_callC NAME for each. Usage: OUT=$OUT bash call2.sh
set -u
export PYTHONUNBUFFERED=1
C=${CALL:-.bundle_callC}
R=${OUT:-.}/res2
T0=$(date +%s)
since() { echo $(( $(date +%s) - T0 )); }
mkdir -p $R rt && tar -C rt -xJf $C/rt.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv > $R/gpu.txt
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
[ -n "${OUT:-}" ] && (cd $OUT && tar czf res2.tgz res2 && rm -rf res2)
left=$(( 570 - $(since) ))
echo "== emu12 $(since)s, $left s left"
CALL=$C EMU=emu12 KPROF= SECS=170 BUDGET=140 END_S=$(( left - 15 )) \
  MODELS="efficientnet_lite0 mobilenet_v3_large ghostnet_100 regnet_y_400mf distilbert timm_resnet26d" \
  bash $(dirname $0)/../2026-12-07-h200-emulated-11/call.sh
echo "done $(since)s"
