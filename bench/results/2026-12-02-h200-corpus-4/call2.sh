#!/bin/bash
# device call 2: corpus batch 32 (second half), then PyTorch at batch 1 for the whole corpus
export PYTHONUNBUFFERED=1
cd .bundle_c2
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in b32B t1; do cp -r rt/* $b/; done
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 3 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step b32B 400 python3 b32B/run.py --out out_b32B --repeat 5 --min-repeat-ms 5 --onnxruntime --torch eager compile_graphs --torch-warm 14 --no-isolate --time-budget 340
step t1 $(( 555 - ($(date +%s) - T0) )) python3 t1/run.py --out out_t1 --torch-only --torch eager compile_graphs --models corpus:wide_resnet50_2 corpus:regnet_x_400mf corpus:mobilenet_v3_small corpus:efficientnet_v2_s corpus:googlenet corpus:inception_v3 corpus:shufflenet_v2_x1_0 corpus:squeezenet1_0 corpus:alexnet corpus:vgg11_bn corpus:mnasnet1_0 corpus:convnext_tiny corpus:swin_t corpus:maxvit_t corpus:lraspp_mobilenet_v3_large --torch-warm 15 --no-isolate --repeat 5 --min-repeat-ms 5 --time-budget $(( 500 - ($(date +%s) - T0) ))
