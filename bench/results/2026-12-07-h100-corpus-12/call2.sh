#!/bin/bash
# Second device call of corpus-12, packed here and not run. Its two halves ran on 2026-12-07 as
# ../2026-12-07-h100-corpus-13/call.sh lp and emu: (1) the layout-prologue calibration (1223bf4) end
# to end on the 10 models whose batch-32 groups it changes on the H100 profile, and PoolFormer-S12 as
# a control, built before it (.bundle_lpold) and with it (.bundle_lpnew):
#   tvm-fusion-hw bundle --out .bundle_lp{old,new} --no-graph --profile nvidia-h100-sxm --batches 32 \
#     --models corpus:alexnet corpus:vgg11_bn corpus:convnext_tiny corpus:vit_b_16 corpus:swin_t corpus:bert \
#              corpus:distilbert corpus:roberta corpus:gpt2 corpus:bart_encoder corpus:poolformer_s12
# (2) the emulated limits of ../2026-12-07-h200-emulated-12 (its .bundle_emu12).
# Packed: ../2026-12-02-h200-corpus-6/assemble.sh .bundle_callC .bundle_lpnew .bundle_lpold .bundle_emu12,
# then ../2026-12-07-h200-corpus-10/pack_solid.sh .bundle_callC NAME for each. Usage: OUT=$OUT bash call2.sh
# (corpus-13's call.sh does both halves; the emulated-limits ncu runs stop 330 s after they start)
CALL=${CALL:-.bundle_callC} END_S=${END_S:-330} exec bash $(dirname $0)/../2026-12-07-h100-corpus-13/call.sh lp emu
