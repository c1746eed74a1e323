#!/bin/bash
# The quiet-host figures quoted in docs/store.md, docs/security.md, docs/pd.md ("a quiet 16-core
# host"): the project's own bench commands one after the other, most important first, each under
# its own deadline and all under one (BUDGET seconds, default 570), outputs into $OUT (default
# bin/quiet-host), one file per step.
#
#   scripts/bench-quiet-host.sh bundle DIR   (build host, with Go) puts into DIR/bundle.tar.gz a
#       stripped bin/mooncake, Redis (redis-server, redis-benchmark and their libraries with the
#       dynamic loader, from this host's Debian packages) and etcd, for a bare host without them.
#   scripts/bench-quiet-host.sh [DIR]        runs the steps; with DIR, from DIR/bundle.tar.gz,
#       otherwise bin/mooncake and Redis and etcd from PATH.
#
# Steps: master (10M objects: load, ops against a 10k pool, listing under load, restart, 256
# clients; Redis beside it), master-remove (10M: remove-by-regex of half, then restart),
# grants (store put/get with data-path grants on vs off, `bench transfer --grants both`),
# failover (10M, HA leader killed), procs (4 KiB from 8 client processes vs Redis), disk (the
# disk tier vs the disk), pd (P/D transfers across TP pairs); STEPS=a,b picks some (restart: 10M
# loaded and restarted, nothing else; grants4k and transfer-grants: the grants' figures with more
# and longer rounds; security: tenants, grants and TLS on vs off in one invocation, `bench store
# --security`; grants-profile: its grants rows of 4 KiB x1 with a CPU profile, grants.pprof, whose
# samples carry each pool's label: go tool pprof -tagfocus pool=grants; grants-paired: the
# store's BenchmarkGrantsPaired, one op with grants and one without in turn; scrub: the store's
# BenchmarkScrubChurn, scrubbing of freed extents on vs off; these are not run by default). The
# last two run the store package's test binary (bin/store.test, built here when Go is on PATH;
# in the bundle).
set -u
R=$(pwd)

if [ "${1:-}" = bundle ]; then
	set -e
	dir=${2:?usage: scripts/bench-quiet-host.sh bundle DIR}
	mkdir -p "$dir"
	st=$(mktemp -d)
	trap 'rm -rf "$st"' EXIT
	go build -trimpath -ldflags "-s -w" -o "$st/mooncake" ./cmd/mooncake
	go test -c -trimpath -ldflags "-s -w" -o "$st/store.test" ./store
	mkdir -p "$st/redis/lib"
	for b in redis-server redis-benchmark; do cp "$(command -v $b)" "$st/redis/"; done
	for b in redis-server redis-benchmark; do
		ldd "$(command -v $b)" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r l; do
			[ -f "$l" ] && cp -L "$l" "$st/redis/lib/"
		done
	done
	cp "$(command -v etcd)" "$st/etcd"
	tar -C "$st" -czf "$dir/bundle.tar.gz" .
	du -sh "$dir/bundle.tar.gz"
	exit 0
fi

OUT=${OUT:-$R/bin/quiet-host}
mkdir -p "$OUT"
M=$R/bin/mooncake
T=$R/bin/store.test
if [ -n "${1:-}" ]; then
	b=$(mktemp -d)
	tar -C "$b" -xzf "$1/bundle.tar.gz"
	for x in redis-server redis-benchmark; do
		printf '#!/bin/sh\nexec %s/redis/lib/ld-linux-x86-64.so.2 --library-path %s/redis/lib %s/redis/%s "$@"\n' "$b" "$b" "$b" $x >"$b/$x"
		chmod +x "$b/$x"
	done
	export PATH=$b:$PATH
	M=$b/mooncake
	T=$b/store.test
fi
BUDGET=${BUDGET:-570}
start=$(date +%s)
{ nproc; free -g; df -h /tmp; uname -a; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; redis-server --version; etcd --version | head -1; git -C "$R" log -1 --format=%h 2>/dev/null; date; } >"$OUT/info.txt" 2>&1
STEPS=,${STEPS:-master,master-remove,grants,failover,procs,disk,pd},
case $STEPS in *,grants-paired,* | *,scrub,*) [ -x "$T" ] || (cd "$R" && go test -c -o "$T" ./store) ;; esac
run() { # name, deadline, command...
	n=$1 t=$2
	shift 2
	case $STEPS in *,$n,*) ;; *) return ;; esac
	left=$((BUDGET - ($(date +%s) - start)))
	[ "$t" -gt "$left" ] && t=$left
	if [ "$t" -lt 10 ]; then
		echo "skipped: ${left}s of the budget left" >"$OUT/$n.txt"
		return
	fi
	s=$(date +%s)
	echo "$ $*" >"$OUT/$n.txt"
	timeout "$t" "$@" >>"$OUT/$n.txt" 2>&1
	echo "rc=$? secs=$(($(date +%s) - s)) deadline=$t" >>"$OUT/$n.txt"
}
big=(--objects ${OBJECTS:-10000000} --rpc-timeout 120s --restore-timeout 5m)
run restart 120 "$M" bench master "${big[@]}" --phases load,restart --skip-redis
run master 200 "$M" bench master "${big[@]}" --phases load,ops,bulk,restart,clients --baseline 10000 --duration 3s
run master-remove 150 "$M" bench master "${big[@]}" --phases load,remove,restart --skip-redis
case $STEPS in *,grants,*) # two commands, one file
	run grants 70 "$M" bench store --grants both --transport tcp --redis off --ops put,get --sizes 4KiB,1MiB --clients 1,8 --rounds 5 --duration 400ms
	mv "$OUT/grants.txt" "$OUT/grants.1"
	run grants 40 "$M" bench transfer --grants both --duration 2s --block-size 1MiB
	cat "$OUT/grants.txt" >>"$OUT/grants.1" && mv "$OUT/grants.1" "$OUT/grants.txt"
	;;
esac
run grants4k 100 "$M" bench store --grants both --transport tcp --redis off --ops put,get --sizes 4KiB --clients 1,8 --rounds 9 --duration 1s
run transfer-grants 80 "$M" bench transfer --grants both --duration 2s --rounds 9 --block-size 1MiB
run security 200 "$M" bench store --security --sizes 4KiB,1MiB --clients 1,8
run grants-profile 60 "$M" bench store --security --features grants --sizes 4KiB --clients 1 --rounds 20 --cpuprofile "$OUT/grants.pprof"
run grants-paired 100 "$T" -test.run '^$' -test.bench BenchmarkGrantsPaired -test.benchtime 8000x -test.count 3
run scrub 120 "$T" -test.run '^$' -test.bench BenchmarkScrubChurn -test.benchtime 10000x -test.count 3
run failover 150 "$M" bench master "${big[@]}" --ha --phases load,failover --skip-redis
run procs 40 "$M" bench store --sizes 4KiB --clients 8 --servers process --client-procs --ops put,get --duration 1s --rounds 3
run disk 40 "$M" bench store-disk --rounds 3 --transport tcp --dir /tmp
run pd 40 "$M" bench pd --model wide-kv --sizes 256 --requests 9 --warmup 1 --output-tokens 4 --tp-pairs 1:1,2:2,4:4,1:2,2:1,1:4,4:1,2:4,4:2
echo "total $(($(date +%s) - start)) s" >>"$OUT/info.txt"
