#!/bin/bash
# Device call: layout prologues (with the split rewrite of 2597c8b) (injective producers of a GEMM operand computed in its
# loads) against the default build (layout_prologues off) and stock; onnxruntime as the reference,
# no per-kernel profile (device time). Built here at the commit that wrote this header (its manifest.json names it) with
#   B32="deit_tiny vit_b_16 swin_t maxvit_t mobilevit_xs levit_128s mixer_b16 shufflenet_v2_x1_0 bert gpt2 convnext_tiny resnet50"
#   tvm-fusion-hw bundle --out .bundle_lp32 --models $(for m in $B32; do echo corpus:$m; done) --batches 32 \
#     --profile nvidia-h200 --no-graph $(for m in $B32; do echo --variant $m.layout:corpus:$m:layout_prologues=True; done)
#   B1="deit_tiny vit_b_16 swin_t maxvit_t mobilevit_xs levit_128s mixer_b16 shufflenet_v2_x1_0 bert gpt2 poolformer_s12"
#   tvm-fusion-hw bundle --out .bundle_lp1 --models $(for m in $B1; do echo corpus:$m; done) --batches 1 \
#     --profile nvidia-h200 $(for m in $B1; do echo --variant $m.layout:corpus:$m:layout_prologues=True; done)
# and compute-sanitizer (memcheck, racecheck) of the ImplicitGemm kernels with layout prologues and split
# slices of six transformers at batch 1 (.bundle_sanlp, from
#   python bench/sanitize_kernels.py --out .bundle_sanlp --models deit_tiny gpt2 bert swin_t mixer_b16 levit_128s \
#     --batches 1 --rules ImplicitGemm --knob layout_prologues=on)
# and .bundle_lpv: ViT-B/16 and DeiT-T at batch 1 and 32 with the take rewrite of fa0d927
#   tvm-fusion-hw bundle --out .bundle_lpv --models corpus:vit_b_16 corpus:deit_tiny --batches 1 32 --profile nvidia-h200 \
#     --no-graph --variant vit_b_16.layout:corpus:vit_b_16:layout_prologues=True \
#     --variant deit_tiny.layout:corpus:deit_tiny:layout_prologues=True
# (the runtime travels once, as .bundle_lp32/rt.tar.xz: the 64 MiB limit; carry the four bundles)
export PYTHONUNBUFFERED=1
[ -d .bundle_lp32/tvm_runtime ] || tar -C .bundle_lp32 -xJf .bundle_lp32/rt.tar.xz
[ -d .bundle_lp1/tvm_runtime ] || tar -C .bundle_lp1 -xJf .bundle_lp32/rt.tar.xz
for b in .bundle_lp1 .bundle_lpv .bundle_sanlp; do [ -d $b/wheels ] || cp -r .bundle_lp32/wheels $b/; done
R=${OUT:-.}/res
mkdir -p $R/b32 $R/b1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
timeout 170 python3 .bundle_lp32/run.py --out /tmp/lp32 --batches 32 --no-graph --no-torch --repeat 10 --time-budget 130 \
  --min-repeat-ms 5 --onnxruntime --no-isolate > $R/b32/run.log 2>&1; echo "rc=$?" >> $R/b32/run.log
cp /tmp/lp32/results.json $R/b32/
timeout 90 python3 .bundle_lp1/run.py --out /tmp/lp1 --batches 1 --no-torch --repeat 10 --time-budget 55 \
  --min-repeat-ms 5 --onnxruntime --no-isolate > $R/b1/run.log 2>&1; echo "rc=$?" >> $R/b1/run.log
cp /tmp/lp1/results.json $R/b1/
# ViT-B/16 and DeiT-T again with the constant takes as slices too (fa0d927), batch 1 and 32
[ -d .bundle_lpv/tvm_runtime ] || cp -r .bundle_lp32/tvm_runtime .bundle_lpv/
mkdir -p $R/takes
timeout 70 python3 .bundle_lpv/run.py --out /tmp/lpv --no-graph --no-torch --repeat 10 --time-budget 50 \
  --min-repeat-ms 5 --onnxruntime --no-isolate > $R/takes/run.log 2>&1; echo "rc=$?" >> $R/takes/run.log
cp /tmp/lpv/results.json $R/takes/
# the sanitizer: 85 kernels in three shards per tool, all six processes at once, after the timing
[ -d .bundle_sanlp/tvm_runtime ] || cp -r .bundle_lp32/tvm_runtime .bundle_sanlp/
python3 -c "
import json
n=sorted(json.load(open('.bundle_sanlp/manifest.json'))['kernels'])
[open(f'/tmp/san{i}.txt','w').write(' '.join(n[i::3])) for i in range(3)]"
for i in 0 1 2; do
  for tool in memcheck racecheck; do
    (timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 python3 .bundle_sanlp/run_kernels.py \
       --kernel-timeout 70 --results /tmp/san_${tool}_$i.json --kernels $(cat /tmp/san$i.txt) \
       > /tmp/san_${tool}_$i.log 2>&1; echo rc=$? >> /tmp/san_${tool}_$i.log) &
  done
done
wait
mkdir -p $R/san && tar -C /tmp -czf $R/san/san.tgz $(cd /tmp && ls san_*.log san_*.json 2>/dev/null)
for f in /tmp/san_*.log; do echo "== $f"; tail -n 3 $f; done
