#!/bin/bash
# device call 1 (stop 26): the GEMM model's tail-wave change, end to end. Two bundles of the same 9
# GEMM-heavy corpus models at batch 32, built here: .bundle_gemm_before (main at 1218eae) and
# .bundle_gemm_after (the tail-wave model), each with
#   tvm-fusion-hw bundle --out .bundle_gemm_X --models corpus:vit_b_16 corpus:deit_tiny corpus:bert corpus:gpt2 \
#     corpus:mixer_b16 corpus:swin_t corpus:resnet50 corpus:alexnet corpus:vgg11_bn --batches 32
# assembled with ../2026-12-02-h200-corpus-6/assemble.sh .bundle_c8a .bundle_gemm_before .bundle_gemm_after;
# run model by model, before then after, so both see the same clocks.
export PYTHONUNBUFFERED=1
cd .bundle_c8a
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in gemm_before gemm_after; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu1.txt
for m in vit_b_16 deit_tiny mixer_b16 swin_t resnet50 alexnet bert gpt2 vgg11_bn; do
  for b in gemm_before gemm_after; do
    extra=""; [ $b = gemm_after ] && extra="--onnxruntime"
    timeout 200 python3 $b/run.py --out out_$b/$m --models corpus:$m --repeat 10 --min-repeat-ms 5 --no-torch \
      --no-isolate --kernel-profile $extra > log_${b}_$m.log 2>&1; echo "rc=$?" >> log_${b}_$m.log
    tail -n 1 log_${b}_$m.log
  done
  echo "== $m $(( $(date +%s) - T0 ))s"
  [ $(( $(date +%s) - T0 )) -gt 520 ] && break
done
tar czf $OUT/c8a.tgz log_* out_gemm_before out_gemm_after
echo "done $(( $(date +%s) - T0 ))s"
