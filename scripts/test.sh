#!/usr/bin/env bash
# The test suite on a CPU-only machine: system packages for ROCm builds, the plugin, then pytest
# with two workers. Tests marked `gpu` skip cleanly where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-system-deps.sh
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 "$@"
