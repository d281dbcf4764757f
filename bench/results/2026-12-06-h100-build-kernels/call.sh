#!/bin/bash
# Device call: the twelve batch-1 corpus models of ../2026-12-06-h100-b1-subset/, built at ea6528e
# (the pipeline builds its kernels itself, BuildKernels) with
#   tvm-fusion-hw bundle --out .bundle_bk --models corpus:resnet50 corpus:mobilenet_v2 corpus:vgg11_bn \
#     corpus:alexnet corpus:deit_tiny corpus:vit_b_16 corpus:swin_t corpus:mixer_b16 corpus:gpt2 corpus:llama \
#     corpus:convnext_tiny corpus:resnext50_32x4d --batches 1
# every row against onnxruntime, the runner flags of ../2026-12-06-h100-b1-subset/call.sh without
# PyTorch (its kernels are byte for byte those of that call's bundle; this call checks the linked
# library runs, CUDA graphs included). Then a GEMM tile sweep of the ViT/Mixer/GPT-2 MLP shapes:
#   python bench/tile_sweep.py build --out .bundle_sweep --runtime --top 8 --profile nvidia-h100-sxm \
#     gemm:197:768:3072 gemm:197:3072:768 gemm:197:2304:768 gemm:128:768:3072
# The bundles travel slimmed (../2026-12-02-h200-corpus-6/assemble.sh .bundle_call .bundle_bk; the
# sweep's libraries in .bundle_call/sweep, its cubins beside the bundle's): the runtime, wheels and
# builders compressed once in rt.tar.xz.
export PYTHONUNBUFFERED=1
mkdir -p rt && tar -C rt -xJf .bundle_call/rt.tar.xz && cp -r rt/* .bundle_call/bk/
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 300 python3 .bundle_call/bk/run.py --out /tmp/bk --repeat 10 --min-repeat-ms 5 --onnxruntime \
  --no-isolate --time-budget 240 > $R/run.log 2>&1
echo "rc=$?" >> $R/run.log
cp /tmp/bk/results.json /tmp/bk/*.md $R/ 2>/dev/null
tail -n 3 $R/run.log
timeout 200 python3 bench/tile_sweep.py run --bundle .bundle_call/bk --sweep .bundle_call/sweep --out $R/sweep \
  > $R/sweep.log 2>&1
echo "rc=$?" >> $R/sweep.log
tail -n 3 $R/sweep.log
