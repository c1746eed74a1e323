#!/usr/bin/env bash
# Python binding tests (the Makefile's test-python target runs this), against
# the installed wheel: a venv (bin/py-venv, with Debian's site packages for
# numpy, torch, pytest) gets `pip install --no-build-isolation ./python`,
# which builds libmooncake.so and the mooncake binary into the package; the
# tests then run with that venv's interpreter from outside the source
# package, and the commands (mooncake_master, ...) are its console scripts.
# The tests start the peer processes, master and storage node they need
# themselves. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
if [ ! -x "$PY" ] || ! "$PY" -c 'import numpy' 2>/dev/null; then
  scripts/deps.sh
elif ! "$PY" -c 'import torch, pytest, setuptools, wheel, pip, venv' 2>/dev/null; then
  scripts/deps.sh || echo "warning: python3-torch/python3-pytest not installed; their tests are skipped" >&2
fi
GO="${GO:-go}"
VENV="$PWD/bin/py-venv"
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
start=$(date +%s)
GO="$GO" "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps --no-index ./python
rm -rf python/build python/*.egg-info
echo "wheel built and installed in $(( $(date +%s) - start ))s"
unset PYTHONPATH MOONCAKE_LIB MOONCAKE_BIN
export PYTHONDONTWRITEBYTECODE=1
# The installed package, its library and its bundled binary, not the checkout's.
"$VENV/bin/python" - "$VENV" <<'PYEOF'
import os, sys
import mooncake, mooncake._native as native, mooncake.cli as cli
venv = os.path.realpath(sys.argv[1])
for what, path in (("package", mooncake.__file__), ("library", native.library_path()), ("binary", cli.mooncake_binary())):
    if not os.path.realpath(path).startswith(venv + os.sep) or not os.path.exists(path):
        sys.exit("test-python: the %s under test is %s, not the wheel's in %s" % (what, path, venv))
print("testing the wheel installed in", venv)
PYEOF
export MOONCAKE_BIN="$("$VENV/bin/python" -c 'import mooncake.cli as c; print(c.mooncake_binary())')"
for c in mooncake mooncake_master mooncake_client mooncake_http_metadata_server transfer_engine_bench \
         mc_store_rest_server transfer_engine_topology_dump; do
  [ -x "$VENV/bin/$c" ] || { echo "test-python: console script $c not installed" >&2; exit 1; }
done
export MC_LOG_LEVEL="${MC_LOG_LEVEL:-error}"  # expected failures in the tests would flood the log
start=$(date +%s)
timeout 600 "$VENV/bin/python" -m unittest discover -s python/tests -v
echo "python tests passed in $(( $(date +%s) - start ))s"
