#!/bin/bash
# device call 1 (stop 25): VGG-11 and DenseNet-121 at batch 1 and 32 with ConvPool's calibrated
# cost (hw) against the pairs fused as before (variants *_fused: pair_cost=false), per-kernel
# times, onnxruntime; the tile sweep of attention's batched matmuls (DeiT-T, ViT-B/16 b32) and
# ViT-B/16's QKV GEMM; then compute-sanitizer memcheck over every ImplicitGemm and
# VectorizedElementwise kernel of the corpus at batch 32 (a list per library, so each process
# reaches its own) and racecheck over the smallest of them, 8 processes side by side
export PYTHONUNBUFFERED=1
cd .bundle_c1
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in cp sweep san32; do cp -r rt/* $b/; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/gpu1.txt
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step cp 150 python3 cp/run.py --out out_cp --repeat 10 --min-repeat-ms 5 --onnxruntime --no-torch --no-isolate --kernel-profile
step sweep 120 python3 sweep/tile_sweep.py run --bundle sweep --sweep sweep --out out_sweep
mkdir -p logs lists
python3 - <<'PY'
import json, collections
k = json.load(open("san32/manifest.json"))["kernels"]
by_lib = collections.defaultdict(list)
for n, e in k.items():
    by_lib[e["library"]].append(n)
libs = sorted(by_lib, key=lambda l: -len(by_lib[l]))
mem = [[] for _ in range(5)]
for lib in libs:  # whole libraries to the shortest list
    min(mem, key=len).extend(sorted(by_lib[lib], key=lambda n: k[n]["arg_bytes"]))
for i, names in enumerate(mem):
    open(f"lists/mem{i}.txt", "w").write(" ".join(names))
small = sorted(k, key=lambda n: k[n]["arg_bytes"])
for i in range(3):
    open(f"lists/race{i}.txt", "w").write(" ".join(small[i::3]))
print(len(k), "kernels in", len(libs), "libraries;", [len(m) for m in mem], "under memcheck")
PY
run_san() { # list tool seconds
  timeout $3 compute-sanitizer --tool $2 --error-exitcode 1 python3 san32/run_kernels.py --kernel-timeout 100 \
    --kernels $(cat lists/$1.txt) --results logs/$1.json > logs/$1.log 2>&1; echo "rc=$?" >> logs/$1.log
}
left=$(( 575 - ($(date +%s) - T0) ))
for i in 0 1 2 3 4; do run_san mem$i memcheck $left & done
for i in 0 1 2; do run_san race$i racecheck $left & done
wait
echo "sanitizer done $(( $(date +%s) - T0 ))s"
for f in logs/*.log; do echo "$f: $(grep -c '\] ok ' $f) ok, $(grep -c '\] \(FAIL\|fail\|error\)' $f) bad, $(tail -n 1 $f)"; done
tar czf $OUT/san.tgz logs lists
