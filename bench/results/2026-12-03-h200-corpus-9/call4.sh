#!/bin/bash
# device call 4 (the machine still warm after call 3, whose sanitizer step got a negative timeout):
# memcheck and racecheck of the 115 RowReduction kernels of the 10 models (3 lists each), and
# racecheck of the five --forms-of kernels at batch 1, every process in parallel, 95 s at most.
cd .bundle_c9
( [ -d sangemv/tvm_runtime ] || { mkdir -p rt && tar -C rt -xJf rt.tar.xz; for b in sangemv sanform sank5; do cp -r rt/tvm_runtime rt/wheels $b/; done; } )
mkdir -p san
python3 -c "
import json
n=sorted(json.load(open('sangemv/manifest.json'))['kernels'])
[open(f'san/gemv{i}.txt','w').write(' '.join(n[i::3])) for i in range(3)]"
for i in 0 1 2; do
  (timeout 95 compute-sanitizer --tool memcheck --error-exitcode 1 python3 sangemv/run_kernels.py --kernel-timeout 60 \
     --results san/gemv_mem$i.json --kernels $(cat san/gemv$i.txt) > san/gemv_mem$i.log 2>&1; echo rc=$? >> san/gemv_mem$i.log) &
  (timeout 95 compute-sanitizer --tool racecheck --error-exitcode 1 python3 sangemv/run_kernels.py --kernel-timeout 60 \
     --results san/gemv_race$i.json --kernels $(cat san/gemv$i.txt) > san/gemv_race$i.log 2>&1; echo rc=$? >> san/gemv_race$i.log) &
done
for k in $(python3 -c "import json; print(' '.join(json.load(open('sanform/manifest.json'))['kernels']))"); do
  (timeout 95 compute-sanitizer --tool racecheck --error-exitcode 1 python3 sanform/run_kernels.py --kernel-timeout 95 \
     --kernels $k --results san/race_$k.json > san/race_$k.log 2>&1; echo rc=$? >> san/race_$k.log) &
done
wait
for f in san/*.log; do echo "== $f"; tail -n 3 $f; done
tar czf $OUT/san9.tgz san
# device call 5 (the last 110 s of device time): racecheck of VGG-11's batch-32 conv2d6+pool (sank5), 55 s:
#   mkdir -p rt san && tar -C rt -xJf rt.tar.xz && cp -r rt/tvm_runtime rt/wheels sank5/
#   timeout 55 compute-sanitizer --tool racecheck --error-exitcode 1 python3 sank5/run_kernels.py --kernel-timeout 55 \
#     --results san/race_k5.json > san/race_k5.log 2>&1   # not finished: rc=124 (san_k5/)
