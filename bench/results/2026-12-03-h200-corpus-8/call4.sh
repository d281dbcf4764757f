#!/bin/bash
# device calls 4 and 5 (prepared at stop 26, NOT RUN yet): `call4.sh A` and `call4.sh B`, the corpus
# at batch 32 in two halves, built at the tail-wave GEMM model with
#   tvm-fusion-hw bundle --out .bundle_b32A --models <corpus.names()[0::2], as corpus:NAME> --batches 32
#   tvm-fusion-hw bundle --out .bundle_b32B --models <corpus.names()[1::2], as corpus:NAME> --batches 32
#   bash ../2026-12-02-h200-corpus-6/assemble.sh .bundle_cA .bundle_b32A     # and .bundle_cB .bundle_b32B
# every row against onnxruntime (issue 13's GPU truth after the tile change) and timed with
# PyTorch eager and torch.compile + CUDA graphs in the same run (issue 14's table); runner flags as
# ../2026-12-02-h200-corpus-5/call1.sh
H=${1:?half: A or B}
export PYTHONUNBUFFERED=1
cd .bundle_c$H
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
cp -r rt/* b32$H/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu_$H.txt
timeout 540 python3 b32$H/run.py --out out_b32$H --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs \
  --torch-warm 14 --no-isolate --time-budget 470 > b32$H.log 2>&1; echo "rc=$?" >> b32$H.log
tail -n 3 b32$H.log
tar czf $OUT/b32$H.tgz b32$H.log out_b32$H
echo "done $(( $(date +%s) - T0 ))s"
