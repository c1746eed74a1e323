# Mooncake in Go. `make test` is the whole test suite (what CI runs);
# `make run` is the main job with embedded defaults.
GO ?= go
BIN := bin/mooncake

.PHONY: all build test test-go test-python deps run python wheel fuzz-smoke clean chaos

all: build

# `mooncake --version` reports VERSION (the git description of the checkout,
# when there is one) besides the build info Go records.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)

build:
	$(GO) build -ldflags "-X github.com/kvcache-go/mooncake/internal/cli.Version=$(VERSION)" -o $(BIN) ./cmd/mooncake

# Installs what the tests need when it is missing (Debian packages), then runs
# vet, the Go tests with the race detector, and the Python binding tests.
test: deps
	$(GO) vet ./...
	$(MAKE) test-go
	$(MAKE) test-python

test-go:
	$(GO) test -race -timeout 30m ./...

test-python:
	@if [ -x scripts/test-python.sh ]; then scripts/test-python.sh; else echo "no python tests yet"; fi

deps:
	@scripts/deps.sh

run: build
	$(BIN) up

# Builds the Python binding: the C ABI (./binding) as python/mooncake/_lib/libmooncake.so.
# Then `PYTHONPATH=python /usr/bin/python3 -c "from mooncake.engine import TransferEngine"` works.
python:
	$(GO) build -buildmode=c-shared -o python/mooncake/_lib/libmooncake.so ./binding

# The wheel (python/pyproject.toml: the mooncake package with libmooncake.so,
# the mooncake binary and Mooncake's console scripts) into bin/; install it
# with pip, or `pip install --no-build-isolation ./python` directly.
wheel:
	GO=$(GO) /usr/bin/python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w bin ./python
	rm -rf python/build python/*.egg-info

# The long chaos suite on the multi-host test bed (internal/chaos with
# MOONCAKE_CHAOS=long: needs root and network namespaces; the short suite runs
# in `make test`) and the long forms of the user-reported failures
# (internal/userfail: 10,000-key batches, a longer master outage; 1 GiB
# objects through the disk tier), then a soak of SOAK (30m) on a fresh bed, then the master at
# pool scale: SCALE objects (10M) through every phase of `mooncake bench
# master` (listing, removal, restart, remove-all under load: it exits 1 on a
# dropped node, a lost or resurrected object or a wrong count). The table of
# scenarios is written to bin/chaos-report.md, the scale figures to
# bin/scale-report.txt.
SOAK ?= 30m
SCALE ?= 10000000
chaos: deps build
	MOONCAKE_CHAOS=long MOONCAKE_CHAOS_REPORT=$(CURDIR)/bin/chaos-report.md $(GO) test -count=1 -timeout 60m -v -run TestChaos ./internal/chaos
	MOONCAKE_CHAOS=long $(GO) test -count=1 -timeout 30m -v ./internal/userfail
	MOONCAKE_CHAOS=long $(GO) test -count=1 -timeout 10m -v -run TestLargeObjectsThroughDiskTier ./store
	$(BIN) bench soak --duration $(SOAK)
	$(BIN) bench master --objects $(SCALE) --phases load,ops,bulk,remove,restart,removeall --restore-timeout 5m --rpc-timeout 60s \
		> bin/scale-report.txt; st=$$?; cat bin/scale-report.txt; exit $$st

clean:
	rm -rf bin
