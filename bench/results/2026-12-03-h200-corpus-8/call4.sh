#!/bin/bash
# device call 4 (prepared at stop 26, NOT RUN yet): the corpus at batch 32, half A, built at the
# tail-wave GEMM model with
#   tvm-fusion-hw bundle --out .bundle_b32A --models <corpus.names()[0::2], as corpus:NAME> --batches 32
#   bash ../2026-12-02-h200-corpus-6/assemble.sh .bundle_c4 .bundle_b32A
# every row against onnxruntime (issue 13's GPU truth after the tile change) and timed with
# PyTorch eager and torch.compile + CUDA graphs in the same run (issue 14's table); runner flags as
# ../2026-12-02-h200-corpus-5/call1.sh
export PYTHONUNBUFFERED=1
cd .bundle_c4
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
cp -r rt/* b32A/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu4.txt
timeout 540 python3 b32A/run.py --out out_b32A --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs \
  --torch-warm 14 --no-isolate --time-budget 470 > b32A.log 2>&1; echo "rc=$?" >> b32A.log
tail -n 3 b32A.log
tar czf $OUT/b32A.tgz b32A.log out_b32A
echo "done $(( $(date +%s) - T0 ))s"
