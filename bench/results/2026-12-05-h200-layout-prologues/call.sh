#!/bin/bash
# Device call (not yet run): layout prologues (injective producers of a GEMM operand computed in its
# loads) against the default build (layout_prologues off) and stock; onnxruntime as the reference,
# per-kernel profile. Built here at the commit that wrote this header (its manifest.json names it) with
#   B32="deit_tiny vit_b_16 swin_t maxvit_t mobilevit_xs levit_128s mixer_b16 shufflenet_v2_x1_0 bert gpt2 convnext_tiny resnet50"
#   tvm-fusion-hw bundle --out .bundle_lp32 --models $(for m in $B32; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $B32; do echo --variant $m.layout:corpus:$m:layout_prologues=True; done)
#   B1="deit_tiny vit_b_16 swin_t maxvit_t mobilevit_xs levit_128s mixer_b16 shufflenet_v2_x1_0 bert gpt2 poolformer_s12"
#   tvm-fusion-hw bundle --out .bundle_lp1 --models $(for m in $B1; do echo corpus:$m; done) --batches 1 \
#     --profile nvidia-h200 $(for m in $B1; do echo --variant $m.layout:corpus:$m:layout_prologues=True; done)
# (the runtime travels once, as .bundle_lp32/rt.tar.xz: the 64 MiB limit; carry both bundles)
export PYTHONUNBUFFERED=1
[ -d .bundle_lp32/tvm_runtime ] || tar -C .bundle_lp32 -xJf .bundle_lp32/rt.tar.xz
[ -d .bundle_lp1/tvm_runtime ] || tar -C .bundle_lp1 -xJf .bundle_lp32/rt.tar.xz
R=${OUT:-.}/res
mkdir -p $R/b32 $R/b1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 320 python3 .bundle_lp32/run.py --out /tmp/lp32 --batches 32 --no-graph --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --kernel-profile --no-isolate > $R/b32/run.log 2>&1; echo "rc=$?" >> $R/b32/run.log
cp /tmp/lp32/results.json /tmp/lp32/kernels.md $R/b32/
timeout 240 python3 .bundle_lp1/run.py --out /tmp/lp1 --batches 1 --no-torch --repeat 10 \
  --min-repeat-ms 5 --onnxruntime --no-isolate > $R/b1/run.log 2>&1; echo "rc=$?" >> $R/b1/run.log
cp /tmp/lp1/results.json $R/b1/
