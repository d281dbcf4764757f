#!/bin/bash
# Device call 1: every Attention kernel of 13 corpus models at batch 1 under memcheck and racecheck,
# then the Attention template against the same build without it, model by model (same clocks).
# The call dir is assembled here with ../2026-12-02-h200-corpus-6/assemble.sh .bundle_callattn
#   .bundle_attA .bundle_attB .bundle_sanattn, from
#   V="pair_templates=conv->window+pointwise_conv->window+depthwise_conv->pointwise_conv"  (the default without the chain)
#   tvm-fusion-hw bundle --out .bundle_attA --models corpus:deit_tiny corpus:bert corpus:gpt2 --batches 1 32 \
#     --variant "noattn_deit:corpus:deit_tiny:$V" --variant "noattn_bert:corpus:bert:$V" --variant "noattn_gpt2:corpus:gpt2:$V"
#   tvm-fusion-hw bundle --out .bundle_attB --models corpus:vit_b_16 corpus:swin_t corpus:t5_encoder --batches 1 \
#     --variant "noattn_vit:corpus:vit_b_16:$V" --variant "noattn_swin:corpus:swin_t:$V" --variant "noattn_t5:corpus:t5_encoder:$V"
#   python bench/sanitize_kernels.py --out .bundle_sanattn --batches 1 --rules Attention --models deit_tiny bert gpt2 \
#     vit_b_16 swin_t t5_encoder bart_encoder distilbert roberta llama levit_128s mobilevit_xs maxvit_t
export PYTHONUNBUFFERED=1
cd .bundle_callattn
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
cp -r rt/* attA/; cp -r rt/* attB/; cp -r rt/tvm_runtime rt/wheels sanattn/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu.txt
mkdir -p san $OUT/out
san() { # name tool seconds
  timeout $3 compute-sanitizer --tool $2 --error-exitcode 1 python3 sanattn/run_kernels.py --results san/$1.json \
    --kernel-timeout 120 > san/$1.log 2>&1; echo "rc=$?" >> san/$1.log
}
san mem memcheck 150 & san race racecheck 150 & wait
echo "sanitizers done $(( $(date +%s) - T0 ))s"
for b in A B; do
  for m in $(python3 -c "import json; print(' '.join(sorted({e['model'] for e in json.load(open('att$b/manifest.json'))['entries']})))"); do
    left=$(( 560 - ($(date +%s) - T0) )); [ $left -lt 20 ] && break 2
    [ $left -gt 150 ] && left=150
    timeout $left python3 att$b/run.py --out $OUT/out/${m#corpus:} --models $m --repeat 10 --min-repeat-ms 5 \
      --onnxruntime --no-torch --no-isolate --kernel-profile > $OUT/out/log_${m#corpus:}.log 2>&1
    echo "rc=$?" >> $OUT/out/log_${m#corpus:}.log; echo "$m done $(( $(date +%s) - T0 ))s"
  done
done
for f in san/*.log; do echo "== $f"; tail -n 4 $f; done
cp -r san $OUT/
echo "all done $(( $(date +%s) - T0 ))s"
# as run, its outputs beyond 8 files did not come back (only the logs and bert\/kernels.md): call2.sh tars them
