#!/bin/bash
# device call 2 (stop 26): every template kernel of the corpus at batch 32 with the tail-wave GEMM
# model (1436 distinct kernels, 245 schedule forms), built here with
#   python bench/sanitize_kernels.py --out .bundle_san32b --batches 32
# memcheck over all of them (4 processes, whole libraries each) and racecheck over one kernel of
# each schedule form (run_kernels.py --one-per-form: the smallest; 6 processes, smallest first)
# until the call's time is up.
export PYTHONUNBUFFERED=1
B=.bundle_san32b
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu2.txt
mkdir -p logs lists
python3 - <<'PY'
import json, collections
m = json.load(open(".bundle_san32b/manifest.json"))
k = m["kernels"]
by_lib = collections.defaultdict(list)
for n, e in k.items():
    by_lib[e["library"]].append(n)
mem = [[] for _ in range(4)]
for lib in sorted(by_lib, key=lambda l: -len(by_lib[l])):  # whole libraries to the shortest list
    min(mem, key=len).extend(sorted(by_lib[lib], key=lambda n: k[n]["arg_bytes"]))
for i, names in enumerate(mem):
    open(f"lists/mem{i}.txt", "w").write(" ".join(names))
smallest = {}
for n, e in k.items():
    if e["form"] not in smallest or e["arg_bytes"] < k[smallest[e["form"]]]["arg_bytes"]:
        smallest[e["form"]] = n
race = sorted(smallest.values(), key=lambda n: k[n]["arg_bytes"])
for i in range(6):
    open(f"lists/race{i}.txt", "w").write(" ".join(race[i::6]))
print(len(k), "kernels,", len(race), "forms;", [len(x) for x in mem], "under memcheck")
PY
run_san() { # list tool seconds
  timeout $3 compute-sanitizer --tool $2 --error-exitcode 1 python3 $B/run_kernels.py --kernel-timeout 120 \
    --kernels $(cat lists/$1.txt) --results logs/$1.json > logs/$1.log 2>&1; echo "rc=$?" >> logs/$1.log
}
left=$(( 560 - ($(date +%s) - T0) ))
for i in 0 1 2 3; do run_san mem$i memcheck $left & done
for i in 0 1 2 3 4 5; do run_san race$i racecheck $left & done
wait
echo "sanitizer done $(( $(date +%s) - T0 ))s"
for f in logs/*.log; do echo "$f: $(grep -c '\] ok ' $f) ok, $(grep -c '\] \(FAIL\|fail\|error\)' $f) bad, $(tail -n 1 $f)"; done
tar czf $OUT/san.tgz logs lists
