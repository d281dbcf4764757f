#!/bin/bash
# One device call: racecheck (and memcheck) of VGG-11's conv2d6+add+relu+max_pool kernel, the ConvPool
# tile that fuses only from batch 4 on. .bundle_sank5b holds it at batch 4 (built with
#   python bench/sanitize_kernels.py --out .bundle_sank5b --batches 4 \
#       --forms-of .bundle_san32b/manifest.json k0005_fused_conv2d6_add4_relu4_max_pool2d4),
# whose cubin is byte-identical to the batch-32 one in .bundle_sank5 (same source sha256, same
# cubin file): the same code a block, a grid 8 times smaller. The batch-32 launch runs beside it.
mkdir -p san
for b in sank5b sank5; do
  (timeout 480 compute-sanitizer --tool racecheck --error-exitcode 1 python3 .bundle_$b/run_kernels.py \
     --kernel-timeout 480 --results san/race_$b.json > san/race_$b.log 2>&1; echo rc=$? >> san/race_$b.log) &
done
(timeout 480 compute-sanitizer --tool memcheck --error-exitcode 1 python3 .bundle_sank5b/run_kernels.py \
   --kernel-timeout 480 --results san/mem_sank5b.json > san/mem_sank5b.log 2>&1; echo rc=$? >> san/mem_sank5b.log) &
wait
for f in san/*.log; do echo "== $f"; tail -n 4 $f; done
cp -r san $OUT/
