#!/usr/bin/env bash
# Load test of the example server on loopback: builds it, starts it behind a
# "trusted proxy" (the load generator itself, on 127.0.0.1), drives it with
# thousands of distinct client IPs in X-Forwarded-For for DURATION (default
# 30s), prints requests/s, latency percentiles, the status mix and the
# server's RSS, then stops the server. Exits non-zero on any answer other
# than 2xx or the intended 429s.
#
#   scripts/load.sh                    # 30 s, 5000 keys, 64 connections
#   DURATION=10s KEYS=20000 scripts/load.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-30s}"
keys="${KEYS:-5000}"
conc="${CONCURRENCY:-64}"
port="${PORT:-18080}"

bin="$(mktemp -d)"
trap 'kill "${pid:-}" 2>/dev/null || true; wait "${pid:-}" 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin/server" ./examples/server
go build -o "$bin/loadgen" ./tools/loadgen

"$bin/server" -addr "127.0.0.1:$port" -trusted-proxy 127.0.0.1/32 2>"$bin/server.log" &
pid=$!
for _ in $(seq 50); do
	curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	sleep 0.1
done

status=0
"$bin/loadgen" -url "http://127.0.0.1:$port/auth/available/user_id?userId=alice" \
	-duration "$duration" -keys "$keys" -concurrency "$conc" -pid "$pid" || status=$?
echo "server log lines: $(wc -l <"$bin/server.log") (denials are logged at most once per key per reset period)"
exit $status
