#!/bin/bash
# Device call 5: the five NLP encoders of call 4 at batch 1 with torch.compile + CUDA graphs in the
# same process (issue 14's comparison), from the same .bundle_attC.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p res5
for m in bert gpt2 t5_encoder llama bart_encoder; do
  left=$(( 520 - ($(date +%s) - T0) )); [ $left -lt 30 ] && break
  [ $left -gt 150 ] && left=150
  timeout $left python3 .bundle_attC/run.py --out res5/$m --models corpus:$m --batches 1 --repeat 10 --min-repeat-ms 5 \
    --torch compile_graphs --no-isolate > res5/log_$m.log 2>&1
  echo "rc=$?" >> res5/log_$m.log; echo "$m done $(( $(date +%s) - T0 ))s"
done
grep -h "ms\b" res5/log_*.log | grep -E "hw_graph|compile|torch" | head -40
tar czf $OUT/call5.tgz res5
