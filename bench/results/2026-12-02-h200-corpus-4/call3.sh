#!/bin/bash
# device call 3: compute-sanitizer over the template kernels (batch 1 and 32), the fuzz seed set
export PYTHONUNBUFFERED=1
cd .bundle_c3
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in san fz; do cp -r rt/* $b/; done
mkdir -p logs
timeout 150 python3 fz/run.py --out out_fz --repeat 2 --min-repeat-ms 1 --onnxruntime --torch --no-isolate > logs/fz.log 2>&1 &
run_san() { # name tool seconds
  timeout $3 compute-sanitizer --tool $2 --error-exitcode 1 python3 san/run_kernels.py --kernel-timeout 120 \
    --kernels $(cat lists/$1.txt) --results logs/$1.json > logs/$1.log 2>&1; echo "rc=$?" >> logs/$1.log
}
for i in 0 1 2 3; do run_san mem$i memcheck 330 & done
for i in 0 1 2 3; do run_san raceb1_$i racecheck 420 & done
for i in 0 1 2; do run_san raceb32_$i racecheck 420 & done
wait
echo "all done $(( $(date +%s) - T0 ))s"
for f in logs/*.log; do echo "$f: $(grep -c '\] ok ' $f) ok, $(grep -c '\] \(FAIL\|fail\|error\)' $f) bad, $(tail -n 1 $f)"; done
tar czf $OUT/logs.tgz logs out_fz
