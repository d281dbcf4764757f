#!/bin/bash
# Device call: the GEMM tile model's long-step slowdown (GemmConfig.long_step_slowdown) timed on the GPU.
# Eight corpus models at batch 1 and 32, built twice here, without CUDA graphs:
#   before (b74d8da, the model without the term), in a clone of that commit with its own .venv:
#     tvm-fusion-hw bundle --out /tmp/bundle_before --models $M --batches 1 32 --no-graph
#   after (its child commit, the term at 0.3):
#     tvm-fusion-hw bundle --out .bundle_after --models $M --batches 1 32 --no-graph
#   M="corpus:resnet50 corpus:densenet121 corpus:inception_v3 corpus:convnext_tiny corpus:vit_b_16 corpus:swin_t
#      corpus:gpt2 corpus:mixer_b16"
# slimmed with ../2026-12-02-h200-corpus-6/assemble.sh .bundle_call /tmp/bundle_before .bundle_after, the stock
# libraries left out (the rows' reference is then the hw build; onnxruntime checks both).
# The two bundles alternate twice (before, after, before, after) so that drift shows.
export PYTHONUNBUFFERED=1
mkdir -p rt && tar -C rt -xJf .bundle_call/rt.tar.xz && cp -r rt/* .bundle_call/before/ && cp -r rt/* .bundle_call/after/
R=${OUT:-.}/res
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
for round in 1 2; do
  for v in before after; do
    extra=""
    [ $round = 1 ] && extra="--onnxruntime"
    timeout 135 python3 .bundle_call/$v/run.py --out /tmp/$v$round --repeat 10 --min-repeat-ms 5 --no-torch \
      --no-isolate --time-budget 115 $extra > $R/$v$round.log 2>&1
    echo "rc=$?" >> $R/$v$round.log
    cp /tmp/$v$round/results.json $R/$v$round.json 2>/dev/null
    tail -n 2 $R/$v$round.log
  done
done
