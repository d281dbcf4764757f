#!/bin/bash
# device call 2 (stop 25): the GEMM tile sweep of the corpus' heaviest GEMMs at batch 32 (ViT-B/16,
# BERT, GPT-2, Mixer, Swin-T, VGG-11, ResNet-50, AlexNet) and two at batch 1: the model's top 8
# tiles and their one-choice neighbours, each timed alone and checked against dlight
# built here with:
#   python bench/tile_sweep.py build --out .bundle_sweep2 --runtime --top 8 \
#     corpus:vit_b_16:32:fused_matmul5_add10_add7 corpus:vit_b_16:32:fused_matmul4_add8_divide_erf_add9_multiply2_multiply3 \
#     corpus:vit_b_16:32:fused_matmul3_add6 corpus:bert:32:fused_matmul4_add5_add2 \
#     corpus:bert:32:fused_matmul3_add7_divide_erf_add8_multiply1_multiply2 corpus:bert:32:fused_matmul_add5 \
#     corpus:gpt2:32:fused_matmul_add3 corpus:mixer_b16:32:fused_matmul1_add3 corpus:vgg11_bn:32:fused_conv2d4_add3_relu3 \
#     corpus:resnet50:32:fused_conv2d16_add9_relu7 corpus:resnet50:32:fused_conv2d2_add1_relu1 \
#     corpus:resnet50:32:fused_conv2d13_add10_add11_relu8 corpus:swin_t:32:fused_matmul14_add20 \
#     corpus:alexnet:32:fused_conv2d1_add1_relu1 corpus:vit_b_16:1:fused_matmul_add2 corpus:bert:1:fused_matmul_add3
#   mkdir .bundle_c2; (cd .bundle_sweep2 && tar cf - tvm_runtime wheels) | xz -6 > .bundle_c2/rt.tar.xz
#   (cd .bundle_sweep2 && tar cf - --exclude=./tvm_runtime --exclude=./wheels .) | xz -6 > .bundle_c2/sweep2.tar.xz
export PYTHONUNBUFFERED=1
cd .bundle_c2
T0=$(date +%s)
mkdir -p rt sweep2 && tar -C rt -xJf rt.tar.xz && tar -C sweep2 -xJf sweep2.tar.xz && cp -r rt/* sweep2/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu2.txt
timeout 420 python3 sweep2/tile_sweep.py run --bundle sweep2 --sweep sweep2 --out out_sweep2 > sweep2.log 2>&1; echo "rc=$?" >> sweep2.log
tail -n 3 sweep2.log
tar czf $OUT/sweep2.tgz sweep2.log out_sweep2
echo "done $(( $(date +%s) - T0 ))s"
