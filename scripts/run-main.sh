#!/usr/bin/env bash
# The main job: compile MobileNetV2 for the NVIDIA H200 profile with hardware-aware fusion and
# print every fusion decision, then stock TVM's kernel count and compile time for comparison.
# Extra arguments go to `tvm-fusion-hw compile` (e.g. --profile nvidia-rtx-3060 --batch 32).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tvm-fusion-hw compile mobilenet_v2 --profile nvidia-h200 --compare-stock "$@"
