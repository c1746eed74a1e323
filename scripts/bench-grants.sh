#!/bin/sh
# Data-path grants on vs off, as ratios measured side by side: the store's
# put/get of 4 KiB and 1 MiB by 1 and 8 clients (BenchmarkGrants, run
# ROUNDS times; each round runs off then on for every configuration, and
# the median of the per-round ratios is printed), the latency of 4 KiB
# put/get with one op of each in turn (BenchmarkGrantsPaired), then
# `mooncake bench transfer --grants both` (1 MiB writes).
# Usage: scripts/bench-grants.sh [ROUNDS]
set -eu
rounds=${1:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/store.test" ./store
go build -o "$tmp/mooncake" ./cmd/mooncake
for i in $(seq "$rounds"); do
	"$tmp/store.test" -test.run '^$' -test.bench '^BenchmarkGrants$' -test.benchtime 1s >"$tmp/r$i.txt"
done
cat "$tmp"/r*.txt | awk '
/^BenchmarkGrants\// {
	split($1, p, "/"); cfg = p[2] " " p[3] " " p[4]; on = (p[5] ~ /grants=true/)
	ns = $3
	if (on) { k = cfg SUBSEP (++non[cfg]); onv[k] = ns } else { k = cfg SUBSEP (++noff[cfg]); offv[k] = ns }
	if (!(cfg in seen)) { seen[cfg] = 1; order[++n] = cfg }
}
END {
	print "grants on vs off (ops/s ratio = off ns/op / on ns/op, median of " '"$rounds"' " side-by-side rounds):"
	for (j = 1; j <= n; j++) {
		cfg = order[j]; m = 0
		for (r = 1; r <= non[cfg] && r <= noff[cfg]; r++) { v[++m] = offv[cfg SUBSEP r] / onv[cfg SUBSEP r] }
		for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (v[b] < v[a]) { t = v[a]; v[a] = v[b]; v[b] = t }
		printf "  %-22s %.3f  (rounds: ", cfg, v[int((m + 1) / 2)]
		for (a = 1; a <= m; a++) printf "%.2f ", v[a]
		print ")"
		delete v
	}
}'
"$tmp/store.test" -test.run '^$' -test.bench '^BenchmarkGrantsPaired$' -test.benchtime 20000x |
	awk '/^BenchmarkGrantsPaired\// { for (i = 3; i < NF; i += 2) if ($(i+1) ~ /on\/off/) printf "  paired %-6s %s %s\n", substr($1, 23), $(i+1), $i }'
"$tmp/mooncake" bench transfer --grants both --duration 2s --block-size 1MiB 2>/dev/null | tail -1
