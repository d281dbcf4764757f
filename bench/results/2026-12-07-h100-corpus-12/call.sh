#!/bin/bash
# Device call of corpus-12: the wide thread tiles and the short-loop prefetch overhead end to end,
# their GEMM sweep, the kernels one by one, and the sanitizer on the wide tiles. Built here with
#   tvm-fusion-hw bundle --out .bundle_next --profile nvidia-h100-sxm --batches 32 --no-graph \
#     --models corpus:deit_tiny corpus:vit_b_16 corpus:gpt2 corpus:llama \
#     --variant M_wide:corpus:M:ImplicitGemm.wide_micro_shapes=8x16+16x8 \
#     --variant M_pf8:corpus:M:ImplicitGemm.prefetch_overhead_steps=8 \
#     --variant M_both:corpus:M:ImplicitGemm.wide_micro_shapes=8x16+16x8,ImplicitGemm.prefetch_overhead_steps=8 \
#     (each of the four models M) --variant vit_b_16_nopc:corpus:vit_b_16:pair_cost=false
#   python bench/tile_sweep.py build --out .bundle_wide --runtime --profile nvidia-h100-sxm --configs default wide \
#     --top 2 <the 16 GEMMs of ../2026-12-07-h100-corpus-11/README.md>
#   python bench/tile_sweep.py build --out .bundle_wsan --runtime --profile nvidia-h100-sxm --configs wide --top 2 \
#     gemm:6304:576:192 gemm:6304:768:192 gemm:4096:512:512 gemm:4096:1376:512
# packed: ../2026-12-02-h200-corpus-6/assemble.sh .bundle_callA .bundle_next .bundle_wide .bundle_wsan, then
# ../2026-12-07-h200-corpus-10/pack_solid.sh .bundle_callA next; the sweeps' folders as they are.
# Usage (carry .bundle_callA): OUT=$OUT bash call.sh
set -u
export PYTHONUNBUFFERED=1
C=${CALL:-.bundle_callA}
R=${OUT:-.}/res
T0=$(date +%s)
mkdir -p $R rt && tar -C rt -xJf $C/rt.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv > $R/gpu.txt
since() { echo $(( $(date +%s) - T0 )); }
b=$C/next
cp -r rt/* $b/
tar -C $b -xJf $C/next.libs.tar.xz && mkdir -p $b/cubin && tar -C $b/cubin -xJf $C/next.cubins.tar.xz
(cd $b/cubin && ls *.bin | xargs -P 16 -n 16 xz -0)
xz -d $b/manifest.json.xz
[ -f $C/next.reports.tar.xz ] && tar -C $b -xJf $C/next.reports.tar.xz
for s in wide wsan; do cp -r rt/* $C/$s/; done
# 1. end to end: hw and its variants, torch.compile + CUDA graphs in the same process
echo "== e2e $(since)s"
timeout 260 python3 $b/run.py --out /tmp/e2e --repeat 7 --min-repeat-ms 5 --onnxruntime --no-isolate \
  --torch compile_graphs --torch-warm 4 --time-budget 230 > $R/e2e.log 2>&1; echo "rc=$?" >> $R/e2e.log
cp /tmp/e2e/results.json /tmp/e2e/results.md $R/ 2>/dev/null; tail -n 2 $R/e2e.log
# 2. the GEMM sweep: default and wide forms' best tiles, 16 transformer GEMMs
echo "== sweep $(since)s"
timeout 130 python3 $C/wide/tile_sweep.py run --bundle $C/wide --sweep $C/wide --out $R/wide --repeat 10 \
  > $R/wide.log 2>&1; echo "rc=$?" >> $R/wide.log; tail -n 1 $R/wide.log
# 3. the sanitizer on the wide tiles (each launched once)
echo "== san $(since)s"
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 $C/wsan/tile_sweep.py run --bundle $C/wsan \
    --sweep $C/wsan --out /tmp/san --once > $R/$tool.log 2>&1; echo "rc=$?" >> $R/$tool.log; tail -n 3 $R/$tool.log
done
# 4. DeiT-T's and ViT-B's kernels one by one, every variant, where time is left
left=$(( 560 - $(since) ))
echo "== kprof $(since)s (left $left)"
[ $left -gt 40 ] && timeout $left python3 $b/run.py --out $R/kprof --models corpus:deit_tiny corpus:vit_b_16 \
  --no-torch --no-graph --no-isolate --repeat 3 --kernel-profile > $R/kprof.log 2>&1
echo "done $(since)s"
[ -n "${OUT:-}" ] && (cd $OUT && tar czf res.tgz res && rm -rf res)
