#!/bin/bash
# device call 4 (stop 22): ncu's DRAM bytes of MNASNet's plans, one ncu process per batch (ncu
# writes its CSV only when the application exits: call 3's single run was killed with nothing
# written), then PyTorch at batch 1 (eager, torch.compile + CUDA graphs) on the corpus models
# without a batch-1 PyTorch row, as many as the time allows
export PYTHONUNBUFFERED=1
cd .bundle_c4
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in emu torch1; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu4.txt
for batch in 1 32; do
  mkdir -p out_ncu_b$batch
  timeout $([ $batch = 1 ] && echo 125 || echo 150) ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    --cache-control all --csv --page raw --print-units base --log-file out_ncu_b$batch/dram.csv \
    python3 emu/run.py --out out_ncu_b$batch --models corpus:mnasnet1_0 --batches $batch --no-graph --no-torch \
    --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > ncu_b$batch.log 2>&1; echo "rc=$?" >> ncu_b$batch.log
  tail -n 1 ncu_b$batch.log; ls -la out_ncu_b$batch/dram.csv
  tar czf $OUT/ncu_b$batch.tgz ncu_b$batch.log out_ncu_b$batch
  echo "== ncu b$batch end $(( $(date +%s) - T0 ))s"
done
left=$(( 555 - ($(date +%s) - T0) ))
timeout $left python3 torch1/run.py --out out_torch1 --torch-only --torch eager compile_graphs --no-isolate \
  --time-budget $(( left - 35 )) > torch1.log 2>&1; echo "rc=$?" >> torch1.log
tail -n 3 torch1.log; tar czf $OUT/torch1.tgz torch1.log out_torch1
echo "done $(( $(date +%s) - T0 ))s"
