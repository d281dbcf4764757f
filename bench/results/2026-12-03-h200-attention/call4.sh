#!/bin/bash
# Device call 4, the final code (8 warps of 1-2 query rows; keys in float4 columns): the seven corpus
# models whose attention fuses, five of them timed against the same build without the chain, model
# by model (same clocks), and the 8 distinct Attention kernels of the seven at batch 1 and 32 under
# memcheck and racecheck. Built here with
#   V="pair_templates=conv->window+pointwise_conv->window+depthwise_conv->pointwise_conv"
#   tvm-fusion-hw bundle --out .bundle_attC --models corpus:bert corpus:gpt2 corpus:t5_encoder corpus:llama \
#     corpus:bart_encoder --batches 1 32 --variant "noattn_bert:corpus:bert:$V" ... (one per model)
#   python bench/sanitize_kernels.py --out .bundle_sanattn --batches 1 32 --rules Attention \
#     --models bert gpt2 t5_encoder bart_encoder distilbert roberta llama
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p res/san res/out
cp -r .bundle_attC/tvm_runtime .bundle_attC/wheels .bundle_sanattn/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > res/gpu.txt
san() { # name tool
  timeout 150 compute-sanitizer --tool $2 --print-limit 20 --error-exitcode 1 python3 .bundle_sanattn/run_kernels.py \
    --results res/san/$1.json --kernel-timeout 120 > res/san/$1.log 2>&1; echo "rc=$?" >> res/san/$1.log
}
san mem memcheck & san race racecheck & wait
echo "sanitizers done $(( $(date +%s) - T0 ))s"
for m in bert gpt2 t5_encoder llama bart_encoder; do
  left=$(( 540 - ($(date +%s) - T0) )); [ $left -lt 20 ] && break
  [ $left -gt 150 ] && left=150
  timeout $left python3 .bundle_attC/run.py --out res/out/$m --models corpus:$m --repeat 10 --min-repeat-ms 5 \
    --onnxruntime --no-torch --no-isolate --kernel-profile > res/out/log_$m.log 2>&1
  echo "rc=$?" >> res/out/log_$m.log; echo "$m done $(( $(date +%s) - T0 ))s"
done
for f in res/san/*.log; do echo "== $f"; grep -E "FAILED|Invalid" $f | sort | uniq -c | head -5; tail -n 3 $f; done
grep -h "ms, rel\|against" res/out/log_*.log | grep -v "stock_graph\|: stock "
tar czf $OUT/call4.tgz res
echo "all done $(( $(date +%s) - T0 ))s"
