#!/bin/bash
# device call 5 (prepared at stop 26, NOT RUN yet): the corpus at batch 32, half B, built at the
# tail-wave GEMM model with
#   tvm-fusion-hw bundle --out .bundle_b32B --models <corpus.names()[1::2], as corpus:NAME> --batches 32
#   bash ../2026-12-02-h200-corpus-6/assemble.sh .bundle_c5 .bundle_b32B
# every row against onnxruntime (issue 13's GPU truth after the tile change) and timed with
# PyTorch eager and torch.compile + CUDA graphs in the same run (issue 14's table); runner flags as
# ../2026-12-02-h200-corpus-5/call1.sh
export PYTHONUNBUFFERED=1
cd .bundle_c5
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
cp -r rt/* b32B/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu5.txt
timeout 540 python3 b32B/run.py --out out_b32B --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs \
  --torch-warm 14 --no-isolate --time-budget 470 > b32B.log 2>&1; echo "rc=$?" >> b32B.log
tail -n 3 b32B.log
tar czf $OUT/b32B.tgz b32B.log out_b32B
echo "done $(( $(date +%s) - T0 ))s"
