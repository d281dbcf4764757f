#!/bin/bash
# Device call 4 (2026-12-04): (1) the tile and the rule's own side: F(2x2, 3x3) against F(4x4, 3x3)
# (winograd_tile=2) on ResNet-18 and VGG-11, and winograd=always against the rule's plan at batch 1
# (where the H200 keeps ResNet-18's and ResNet-50's convs direct: does direct win there?); (2) the
# ImplicitGemm tile sweep of DeiT-T b32's six GEMMs and cuBLAS on the transformers' GEMM shapes
# (../2026-12-04-h200-gemm-shapes). Built here with
#   tvm-fusion-hw bundle --out .bundle_wino4 --models corpus:resnet18 corpus:vgg11_bn corpus:resnet50 --batches 1 32 \
#     --profile nvidia-h200 --no-graph --variant resnet18.f2:corpus:resnet18:winograd_tile=2 \
#     --variant vgg11_bn.f2:corpus:vgg11_bn:winograd_tile=2 --variant resnet18.always:corpus:resnet18:winograd=always \
#     --variant resnet50.always:corpus:resnet50:winograd=always --variant vgg11_bn.always:corpus:vgg11_bn:winograd=always
#   python bench/tile_sweep.py build --out .bundle_sweepdeit --top 6 corpus:deit_tiny:32:<each GEMM kernel>
# (runtimes: .bundle_wino4/rt.tar.xz, unpacked into both)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
[ -d .bundle_wino4/tvm_runtime ] || tar -C .bundle_wino4 -xJf .bundle_wino4/rt.tar.xz
[ -d .bundle_sweepdeit/tvm_runtime ] || cp -r .bundle_wino4/tvm_runtime .bundle_wino4/wheels .bundle_sweepdeit/
R=res4
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 200 python3 .bundle_wino4/run.py --out $R/time --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/time.log 2>&1; echo "rc=$?" >> $R/time.log
echo "models done $(( $(date +%s) - T0 ))s"
timeout 60 python3 bench/results/2026-12-04-h200-gemm-shapes/torch_gemm.py > $R/torch_gemm.md 2> $R/torch_gemm.log
echo "torch done $(( $(date +%s) - T0 ))s"
left=$(( 540 - ($(date +%s) - T0) ))
timeout $left python3 .bundle_sweepdeit/tile_sweep.py run --bundle .bundle_sweepdeit --sweep .bundle_sweepdeit \
  --out $R/sweep > $R/sweep.log 2>&1; echo "rc=$?" >> $R/sweep.log
echo "sweep done $(( $(date +%s) - T0 ))s"
grep -h "ms, rel\|against" $R/time.log | head -60
cat $R/torch_gemm.md; tail -n 3 $R/sweep.log
rm -rf $R/*/results.png
tar czf $OUT/res4.tgz $R
echo "all done $(( $(date +%s) - T0 ))s"
