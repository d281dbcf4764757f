#!/bin/bash
# device call 3: the corpus at batch 1 (both halves, no PyTorch), BART at batch 32 (its row did
# not fit call 1's time budget), then compute-sanitizer memcheck and racecheck over the
# WindowReduction and RowReduction kernels of the corpus (batch 1 and 32), 8 processes side by side
export PYTHONUNBUFFERED=1
cd .bundle_c3
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in b1A b1B bart32 san; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu3.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step b1A 120 python3 b1A/run.py --out out_b1A --repeat 5 --min-repeat-ms 5 --onnxruntime --no-isolate --time-budget 100
step b1B 120 python3 b1B/run.py --out out_b1B --repeat 5 --min-repeat-ms 5 --onnxruntime --no-isolate --time-budget 100
step bart32 90 python3 bart32/run.py --out out_bart32 --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs --no-isolate
mkdir -p logs lists
python3 - <<'PY'
import json
k = json.load(open("san/manifest.json"))["kernels"]
names = sorted(k, key=lambda n: k[n]["arg_bytes"])
for tool in ("mem", "race"):
    for i in range(4):
        open(f"lists/{tool}{i}.txt", "w").write(" ".join(names[i::4]))
print(len(names), "kernels")
PY
run_san() { # list tool seconds
  timeout $3 compute-sanitizer --tool $2 --error-exitcode 1 python3 san/run_kernels.py --kernel-timeout 100 \
    --kernels $(cat lists/$1.txt) --results logs/$1.json > logs/$1.log 2>&1; echo "rc=$?" >> logs/$1.log
}
left=$(( 585 - ($(date +%s) - T0) ))
for i in 0 1 2 3; do run_san mem$i memcheck $left & done
for i in 0 1 2 3; do run_san race$i racecheck $left & done
wait
echo "sanitizer done $(( $(date +%s) - T0 ))s"
for f in logs/*.log; do echo "$f: $(grep -c '\] ok ' $f) ok, $(grep -c '\] \(FAIL\|fail\|error\)' $f) bad, $(tail -n 1 $f)"; done
tar czf $OUT/san.tgz logs lists
