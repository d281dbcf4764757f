#!/bin/bash
# device call 4: the rest of the corpus at batch 1 (no PyTorch: call 3's default --torch ran eager
# and took ~20 s a model), then BART at batch 32 with PyTorch
export PYTHONUNBUFFERED=1
cd .bundle_c3
T0=$(date +%s)
mkdir -p rt && tar -C rt -xJf rt.tar.xz
for b in b1A b1B bart32; do cp -r rt/* $b/; done
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name start $(( $(date +%s) - T0 ))s"
  timeout $secs "$@" > $name.log 2>&1; echo "rc=$?" >> $name.log
  tail -n 2 $name.log
  tar czf $OUT/$name.tgz $name.log $( [ -d out_$name ] && echo out_$name )
  echo "== $name end $(( $(date +%s) - T0 ))s"
}
step b1A 85 python3 b1A/run.py --out out_b1A --repeat 5 --min-repeat-ms 5 --onnxruntime --torch --no-isolate --time-budget 75 --models corpus:efficientnet_v2_s corpus:googlenet corpus:shufflenet_v2_x1_0 corpus:alexnet corpus:mnasnet1_0 corpus:vit_b_16 corpus:maxvit_t corpus:deeplabv3_mobilenet_v3_large corpus:deit_tiny corpus:efficientnet_lite0 corpus:poolformer_s12 corpus:mixer_b16 corpus:hrnet_w18_small corpus:bert corpus:roberta corpus:llama corpus:bart_encoder 
step b1B 85 python3 b1B/run.py --out out_b1B --repeat 5 --min-repeat-ms 5 --onnxruntime --torch --no-isolate --time-budget 75 --models corpus:densenet121 corpus:inception_v3 corpus:squeezenet1_0 corpus:vgg11_bn corpus:convnext_tiny corpus:swin_t corpus:lraspp_mobilenet_v3_large corpus:fcn_resnet50 corpus:timm_resnet26d corpus:mobilevit_xs corpus:levit_128s corpus:ghostnet_100 corpus:dla34 corpus:distilbert corpus:gpt2 corpus:t5_encoder 

