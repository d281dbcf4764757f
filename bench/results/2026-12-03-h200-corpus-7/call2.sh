#!/bin/bash
# device call 2 (stop 25): the GEMM tile sweep of the corpus' heaviest GEMMs at batch 32 (ViT-B/16,
# BERT, GPT-2, Mixer, Swin-T, VGG-11, ResNet-50, AlexNet) and two at batch 1: the model's top 8
# tiles and their one-choice neighbours, each timed alone and checked against dlight
export PYTHONUNBUFFERED=1
cd .bundle_c2
T0=$(date +%s)
mkdir -p rt sweep2 && tar -C rt -xJf rt.tar.xz && tar -C sweep2 -xJf sweep2.tar.xz && cp -r rt/* sweep2/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu2.txt
timeout 420 python3 sweep2/tile_sweep.py run --bundle sweep2 --sweep sweep2 --out out_sweep2 > sweep2.log 2>&1; echo "rc=$?" >> sweep2.log
tail -n 3 sweep2.log
tar czf $OUT/sweep2.tgz sweep2.log out_sweep2
echo "done $(( $(date +%s) - T0 ))s"
