#!/usr/bin/env bash
# Python binding tests (the Makefile's test-python target runs this).
# Builds libmooncake.so (make python) and the mooncake binary, then runs
# python/tests with Debian's python3; the tests start the peer processes,
# master and storage node they need themselves. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
if [ ! -x "$PY" ] || ! "$PY" -c 'import numpy' 2>/dev/null; then
  scripts/deps.sh
elif ! "$PY" -c 'import torch, pytest' 2>/dev/null; then
  scripts/deps.sh || echo "warning: python3-torch/python3-pytest not installed; their tests are skipped" >&2
fi
GO="${GO:-go}"
make --no-print-directory python GO="$GO"
"$GO" build -o bin/mooncake ./cmd/mooncake
export MOONCAKE_BIN="$PWD/bin/mooncake"
export MOONCAKE_LIB="$PWD/python/mooncake/_lib/libmooncake.so"
export PYTHONPATH="$PWD/python"
export PYTHONDONTWRITEBYTECODE=1
export MC_LOG_LEVEL="${MC_LOG_LEVEL:-error}"  # expected failures in the tests would flood the log
start=$(date +%s)
timeout 600 "$PY" -m unittest discover -s python/tests -v
echo "python tests passed in $(( $(date +%s) - start ))s"
