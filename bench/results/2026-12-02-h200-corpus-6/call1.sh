#!/bin/bash
# device call 1 (stop 22): TiledTranspose against hw on the four models with innermost-axis
# transposes (batch 1 and 32, per-kernel times), the 33 batch-1 rows corpus-5 did not rerun (no
# PyTorch), BART at batch 32 with PyTorch, then compute-sanitizer memcheck and racecheck over the
# TiledTranspose kernels of the corpus (batch 1 and 32) and a sample of ImplicitGemm kernels with
# the unrolled K step (ResNet-50, BERT, ViT-B/16, ConvNeXt-T at batch 1), 8 processes side by side
export PYTHONUNBUFFERED=1
cd .bundle_c1
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in tr b1A b1B bart32 santr sangemm; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu1.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step tr 130 python3 tr/run.py --out out_tr --repeat 10 --min-repeat-ms 5 --no-torch --no-isolate --kernel-profile --time-budget 110
step b1A 80 python3 b1A/run.py --out out_b1A --repeat 5 --min-repeat-ms 5 --onnxruntime --no-torch --no-isolate --time-budget 65
step b1B 80 python3 b1B/run.py --out out_b1B --repeat 5 --min-repeat-ms 5 --onnxruntime --no-torch --no-isolate --time-budget 65
step bart32 150 python3 bart32/run.py --out out_bart32 --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs --no-isolate
mkdir -p logs lists
python3 - <<'PY'
import json
for b in ("santr", "sangemm"):
    k = json.load(open(f"{b}/manifest.json"))["kernels"]
    names = sorted(k, key=lambda n: k[n]["arg_bytes"])
    for tool in ("mem", "race"):
        for i in range(2):
            open(f"lists/{b}_{tool}{i}.txt", "w").write(" ".join(names[i::2]))
    print(b, len(names), "kernels")
PY
run_san() { # bundle list tool seconds
  timeout $4 compute-sanitizer --tool $3 --error-exitcode 1 python3 $1/run_kernels.py --kernel-timeout 100 \
    --kernels $(cat lists/$2.txt) --results logs/$2.json > logs/$2.log 2>&1; echo "rc=$?" >> logs/$2.log
}
left=$(( 580 - ($(date +%s) - T0) ))
for b in santr sangemm; do for i in 0 1; do
  run_san $b ${b}_mem$i memcheck $left & run_san $b ${b}_race$i racecheck $left &
done; done
wait
echo "sanitizer done $(( $(date +%s) - T0 ))s"
for f in logs/*.log; do echo "$f: $(grep -c '\] ok ' $f) ok, $(grep -c '\] \(FAIL\|fail\|error\)' $f) bad, $(tail -n 1 $f)"; done
tar czf $OUT/san.tgz logs lists
