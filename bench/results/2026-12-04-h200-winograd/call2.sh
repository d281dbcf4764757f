#!/bin/bash
# Device call 2 (2026-12-04): (1) the other corpus models with a Winograd decision on the H200 at
# batch 32, hw against winograd=off, torch.compile + CUDA graphs in the same process; (2) the proof
# for the one decision that differs between the H200 and the RTX 3060 on ResNet-18 b32 (the four
# 64-channel 3x3 convs: Winograd on the H200, direct on the RTX 3060): each plan under the other's
# limits on the H200 and, as the decision is bandwidth-driven, each plan's DRAM bytes (ncu, cold
# caches) for the modelled time on the 3060's roofline; (3) memcheck of Inception-v3 b32 (tiles
# that overhang 35x35, 17x17 and 8x8 outputs). Built here with
#   M="wide_resnet50_2 efficientnet_v2_s googlenet inception_v3 squeezenet1_0 maxvit_t deeplabv3_mobilenet_v3_large
#      fcn_resnet50 timm_resnet26d mobilevit_xs hrnet_w18_small dla34"
#   tvm-fusion-hw bundle --out .bundle_wino2 --models $(for m in $M; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $M; do echo --variant $m.nowino:corpus:$m:winograd=off; done)
#   tvm-fusion-hw bundle --out .bundle_emuwino --models corpus:resnet18 --batches 32 --profile nvidia-h200 --no-graph \
#     --variant resnet18.f3060_l3060:corpus:resnet18:fusion_profile=nvidia-rtx-3060,limits=nvidia-rtx-3060 \
#     --variant resnet18.fh200_l3060:corpus:resnet18:fusion_profile=nvidia-h200,limits=nvidia-rtx-3060 \
#     --variant resnet18.f3060_lh200:corpus:resnet18:fusion_profile=nvidia-rtx-3060,limits=nvidia-h200
# (the bundles travel without tvm_runtime/wheels: .bundle_wino2's rt.tar.xz holds them, xz -9 of the
# two folders, unpacked into both there: the call's 64 MiB limit.)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
[ -d .bundle_wino2/tvm_runtime ] || tar -C .bundle_wino2 -xJf .bundle_wino2/rt.tar.xz
[ -d .bundle_emuwino/tvm_runtime ] || cp -r .bundle_wino2/tvm_runtime .bundle_wino2/wheels .bundle_emuwino/
R=res2
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 330 python3 .bundle_wino2/run.py --out $R/time --batches 32 --no-graph --torch compile_graphs --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate --time-budget 280 > $R/time.log 2>&1; echo "rc=$?" >> $R/time.log
echo "timing done $(( $(date +%s) - T0 ))s"
timeout 60 python3 .bundle_emuwino/run.py --out $R/emu --batches 32 --no-graph --no-torch --repeat 20 \
  --kernel-profile --no-isolate > $R/emu.log 2>&1; echo "rc=$?" >> $R/emu.log
echo "emu done $(( $(date +%s) - T0 ))s"
mkdir -p $R/ncu
timeout 120 ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw \
  --print-units base --log-file $R/ncu/dram.csv python3 .bundle_emuwino/run.py --out $R/ncu --batches 32 --no-graph \
  --no-torch --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/ncu.log 2>&1
echo "rc=$?" >> $R/ncu.log; echo "ncu done $(( $(date +%s) - T0 ))s"
left=$(( 570 - ($(date +%s) - T0) ))
timeout $left compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 python3 .bundle_wino2/run.py \
  --out $R/san_mem --models corpus:inception_v3 --batches 32 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > $R/san_mem.log 2>&1; echo "rc=$?" >> $R/san_mem.log
echo "memcheck done $(( $(date +%s) - T0 ))s"
grep -E "ERROR SUMMARY" $R/san_mem.log | sort | uniq -c | head -3; tail -n 1 $R/san_mem.log
grep -h "ms, rel\|against\|torch" $R/time.log $R/emu.log | head -80
rm -rf $R/*/results.png
tar czf $OUT/res2.tgz $R
echo "all done $(( $(date +%s) - T0 ))s"
