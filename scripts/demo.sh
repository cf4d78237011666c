#!/usr/bin/env bash
# The README's demo: train the digits CNN with Horovod and check the accuracy it must reach.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${RINGTRAIN_VENV:-.venv}/bin"
TARGET=0.95

echo "demo: training ringtrain/models/digits.py on local slots (target held-out accuracy >= $TARGET)"
"$BIN/ringtrain" launch ringtrain/models/digits.py --target-accuracy "$TARGET"
echo "demo: passed (accuracy >= $TARGET)"
