#!/bin/bash
# device call 3 (stop 22): ncu's DRAM bytes of MNASNet's plans (the depthwise -> pointwise
# decisions the bandwidth drives: call 2's ncu step ran out of time after the first library),
# then compute-sanitizer memcheck and racecheck over the kernels of the new default rules in the
# eight models they change (VectorizedElementwise with several outputs, TiledTranspose: batch 1
# and 32), memcheck over every ImplicitGemm kernel of the corpus at batch 1 (the unrolled K step)
# and racecheck over every fourth of them, 8 processes side by side
export PYTHONUNBUFFERED=1
cd .bundle_c3
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in emu sanve sangemm1; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu3.txt
mkdir -p out_emu_ncu
echo "== emu_ncu start"
timeout 240 ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --cache-control all --csv --page raw --print-units base \
  --log-file out_emu_ncu/dram.csv python3 emu/run.py --out out_emu_ncu --models corpus:mnasnet1_0 --no-graph --no-torch \
  --no-isolate --repeat 1 --number 1 --min-repeat-ms 0 > emu_ncu.log 2>&1; echo "rc=$?" >> emu_ncu.log
tail -n 2 emu_ncu.log; tar czf $OUT/emu_ncu.tgz emu_ncu.log out_emu_ncu
echo "== emu_ncu end $(( $(date +%s) - T0 ))s"
mkdir -p logs lists
python3 - <<'PY'
import json
for b, race_every in (("sanve", 1), ("sangemm1", 4)):
    k = json.load(open(f"{b}/manifest.json"))["kernels"]
    names = sorted(k, key=lambda n: k[n]["arg_bytes"])
    for i in range(2):
        open(f"lists/{b}_mem{i}.txt", "w").write(" ".join(names[i::2]))
        open(f"lists/{b}_race{i}.txt", "w").write(" ".join(names[::race_every][i::2]))
    print(b, len(names), "kernels,", len(names[::race_every]), "under racecheck")
PY
run_san() { # bundle list tool seconds
  timeout $4 compute-sanitizer --tool $3 --error-exitcode 1 python3 $1/run_kernels.py --kernel-timeout 100 \
    --kernels $(cat lists/$2.txt) --results logs/$2.json > logs/$2.log 2>&1; echo "rc=$?" >> logs/$2.log
}
left=$(( 585 - ($(date +%s) - T0) ))
for b in sanve sangemm1; do for i in 0 1; do
  run_san $b ${b}_mem$i memcheck $left & run_san $b ${b}_race$i racecheck $left &
done; done
wait
echo "sanitizer done $(( $(date +%s) - T0 ))s"
for f in logs/*.log; do echo "$f: $(grep -c '\] ok ' $f) ok, $(grep -c '\] \(FAIL\|fail\|error\)' $f) bad, $(tail -n 1 $f)"; done
tar czf $OUT/san.tgz logs lists
