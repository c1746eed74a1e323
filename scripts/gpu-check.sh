#!/usr/bin/env bash
# The GPU device check: one command on a bare GPU machine (no Go, no
# toolchain), from binaries built on a build host.
#
#   scripts/gpu-check.sh build DIR   (build host, with Go) puts into DIR the
#       test binaries (internal/cuda, transfer, store), the mooncake binary,
#       the Python binding (libmooncake.so + python/mooncake, python/tests)
#       and this script.
#   bash DIR/gpu-check.sh            (GPU machine) runs, in under 5 minutes:
#       the real-driver tests (internal/cuda TestRealDriver, then the device
#       tests of transfer and store, then python/tests/test_cuda with torch
#       CUDA when present, all with MOONCAKE_GPU_TESTS=real), then the
#       figures: `mooncake bench transfer` with device memory, device ->
#       remote device over loopback TCP and over shm (CUDA IPC), device ->
#       host and host -> device over TCP, each as a ratio to this host's
#       pinned cuMemcpy bandwidth measured in the same run.
set -uo pipefail

if [ "${1:-}" = build ]; then
  set -e
  dir=${2:?usage: scripts/gpu-check.sh build DIR}
  cd "$(dirname "$0")/.."
  mkdir -p "$dir/python/mooncake/_lib"
  flags=(-trimpath -ldflags=-s\ -w)
  go test -c "${flags[@]}" -o "$dir/cuda.test" ./internal/cuda
  go test -c "${flags[@]}" -o "$dir/transfer.test" ./transfer
  go test -c "${flags[@]}" -o "$dir/store.test" ./store
  go build "${flags[@]}" -o "$dir/mooncake" ./cmd/mooncake
  go build "${flags[@]}" -buildmode=c-shared -o "$dir/python/mooncake/_lib/libmooncake.so" ./binding
  cp python/mooncake/*.py "$dir/python/mooncake/"
  mkdir -p "$dir/python/tests"
  cp python/tests/*.py "$dir/python/tests/"
  cp scripts/gpu-check.sh "$dir/gpu-check.sh"
  du -sh "$dir"
  exit 0
fi

cd "$(dirname "$0")"
DIR=$PWD
# (MOONCAKE_GPU_TESTS=sim and MOONCAKE_CUDA_LIB=<simulated driver> dry-run it on a build host.)
export MOONCAKE_GPU_TESTS=${MOONCAKE_GPU_TESTS:-real} MOONCAKE_CUDA_LIB=${MOONCAKE_CUDA_LIB:-} GOTRACEBACK=all
fail=0
step() { echo; echo "=== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4

step "real-driver tests: internal/cuda"
timeout 120 ./cuda.test -test.v -test.run 'TestRealDriver|TestLoad' 2>&1 | grep -E '^(---|===|PASS|FAIL|ok)|driver_test' || true
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
step "real-driver tests: transfer (device tests, MOONCAKE_GPU_TESTS=real)"
timeout 120 ./transfer.test -test.v -test.run 'Device' 2>&1 | grep -E '^\s*(---|PASS|FAIL|ok)|device_test' || true
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
step "real-driver tests: store (device buffers)"
timeout 120 ./store.test -test.v -test.run 'TestDeviceBuffers' 2>&1 | grep -E '^\s*(---|PASS|FAIL|ok)|device_test' || true
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
step "real-driver tests: python (test_cuda)"
(cd python/tests && MOONCAKE_LIB=$DIR/python/mooncake/_lib/libmooncake.so MOONCAKE_BIN=$DIR/mooncake \
  PYTHONPATH=$DIR/python MC_LOG_LEVEL=error timeout 180 python3 -m unittest -v test_cuda 2>&1 | grep -vE 'level=INFO' | tail -12)
[ "${PIPESTATUS[0]}" = 0 ] || fail=1

step "figures: mooncake bench transfer, 4 MiB requests, batch 4, 2 threads, 4 s each"
out=$(mktemp)
bench() { # name, flags...
  local name=$1; shift
  if timeout 60 ./mooncake bench transfer --json --block-size 4MiB --batch-size 4 --threads 2 --duration 4s "$@" >"$out.1" 2>"$out.err"; then
    echo "$name $(tail -1 "$out.1")" >>"$out"
  else
    echo "$name FAILED: $(tail -3 "$out.err")"; fail=1
  fi
}
bench "device->remote-device/tcp" --device cuda --transport tcp
bench "device->remote-device/shm" --device cuda --transport shm
bench "device->host/tcp" --device cuda --target-device cpu --transport tcp
bench "host->device/tcp" --device cpu --target-device cuda --transport tcp
python3 - "$out" <<'PY'
import json, sys
rows = [l.split(" ", 1) for l in open(sys.argv[1]) if l.strip()]
print("%-28s %10s %14s %8s %s" % ("path", "GB/s", "pinned GB/s", "ratio", "served by"))
for name, js in rows:
    r = json.loads(js)
    print("%-28s %10.2f %14.2f %8.2f %s" % (name, r["gb_per_s"], r["baseline_gb_per_s"], r["ratio"], r["served_transport"]))
PY
rm -f "$out" "$out.1" "$out.err"
echo
if [ $fail = 0 ]; then echo "GPU CHECK PASSED"; else echo "GPU CHECK FAILED"; fi
exit $fail
