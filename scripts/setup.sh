#!/usr/bin/env bash
# Create .venv (if missing) and install the plugin into it, editable, with its test extras.
# Shared by scripts/run-main.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
