#!/bin/bash
# The quiet-host figures quoted in docs/store.md, docs/pd.md and docs/conductor.md ("a quiet
# 16-core host"): the project's own bench commands one after the other, each under a deadline,
# outputs into $OUT (default bin/quiet-host). Needs bin/mooncake (`make build`) and
# bin/conductor.test (`go test -c -o bin/conductor.test ./internal/conductor`); Redis from PATH,
# or from bin/redis (redis-server, redis-benchmark and their libraries, with the dynamic loader
# in bin/redis/lib) on a host without it.
set -u
R=$(pwd)
OUT=${OUT:-$R/bin/quiet-host}
mkdir -p "$OUT"
if ! command -v redis-server >/dev/null && [ -x bin/redis/redis-server ]; then
	w=$(mktemp -d)
	for b in redis-server redis-benchmark; do
		printf '#!/bin/sh\nexec %s/bin/redis/lib/ld-linux-x86-64.so.2 --library-path %s/bin/redis/lib %s/bin/redis/%s "$@"\n' "$R" "$R" "$R" $b >"$w/$b"
		chmod +x "$w/$b"
	done
	export PATH=$w:$PATH
fi
M=$R/bin/mooncake
{ nproc; free -g; uname -a; redis-server --version; } >"$OUT/info.txt" 2>&1
run() {
	n=$1 t=$2
	shift 2
	s=$(date +%s)
	timeout "$t" "$@" >"$OUT/$n.txt" 2>&1
	echo "rc=$? secs=$(($(date +%s) - s))" >>"$OUT/$n.txt"
}
run procs 80 "$M" bench store --sizes 4KiB --clients 8 --servers process --client-procs --ops put,get --duration 1s --rounds 3
run disk 100 "$M" bench store-disk --rounds 3 --transport tcp --dir /tmp
run master 240 "$M" bench master --objects 10000000 --phases load,ops,bulk,restart --baseline 0 --skip-redis --rpc-timeout 120s --restore-timeout 5m
run pd 80 "$M" bench pd --model tiny-tp --sizes 2048 --requests 5 --warmup 1 --tp-pairs 1:1,2:2,4:4,1:2,2:1,1:4,4:1,2:4,4:2
(cd internal/conductor && run cond 50 "$R/bin/conductor.test" -test.run '^$' -test.bench 'Query/blocks=1M' -test.benchtime 1000x)
