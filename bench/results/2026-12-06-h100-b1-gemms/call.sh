#!/bin/bash
# Device call: where ViT-B/16, Mixer-B/16 and GPT-2 spend their batch-1 time (the three behind
# torch.compile + CUDA graphs in ../2026-12-06-h100-b1-subset/): each kernel of the plugin's build
# timed alone (--kernel-profile), and cuBLAS on their GEMM shapes (torch_gemm_b1.py). The bundle is
# that call's .bundle_b1x, carried slim: bash ../2026-12-02-h200-corpus-6/assemble.sh .bundle_call1 .bundle_b1x
export PYTHONUNBUFFERED=1
D=$(dirname $0)
R=${OUT:-.}/res
mkdir -p $R
cd .bundle_call1 && mkdir -p rt && tar -C rt -xJf rt.tar.xz && cp -r rt/* b1x/ && cd ..
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
python3 $D/torch_gemm_b1.py > $R/torch_gemm_b1.md 2> $R/torch_gemm_b1.err
timeout 300 python3 .bundle_call1/b1x/run.py --out /tmp/kp --models corpus:vit_b_16 corpus:mixer_b16 corpus:gpt2 \
  --repeat 10 --min-repeat-ms 5 --no-torch --kernel-profile --time-budget 240 > $R/run.log 2>&1
echo "rc=$?" >> $R/run.log
cp /tmp/kp/results.md /tmp/kp/kernels.md $R/ 2>/dev/null
tail -n 2 $R/run.log
