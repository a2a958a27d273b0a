#!/usr/bin/env bash
# Measures the test commands whose times README.md and docs/testing.md
# quote, the way they promise them: on a fresh clone of a commit with
# empty module and build caches, `go test ./...` of the core module (then
# again, warm), then scripts/test.sh as CI runs it. It writes the report
# benchmarks/reports/testtimes.md (machine, load average at the start and
# the end, date, each step, every figure by name) that the docs quote.
#
#   scripts/test-times.sh               # the current branch's last commit
#
# The clone is shallow (one commit, as a CI checkout may be): the API
# check, among the tests, must need no history.
#
# It takes as long as the tests (8 minutes and more) and loads both cores:
# the figures it writes are as good as the machine was quiet, which the
# report's load average says. scripts/test.sh runs with
# FLOODGATE_REQUIRE_SERVERS=1, as CI does: it needs redis-server,
# prometheus and chromium (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
branch="$(git symbolic-ref --short HEAD)"
commit="$(git rev-parse --verify HEAD)"
tmp="$(mktemp -d)"
# Module caches are read-only by design: chmod makes them removable.
trap 'chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
git clone -q --depth 1 --branch "$branch" "file://$repo" "$tmp/clone"
if [[ "$(git -C "$tmp/clone" rev-parse HEAD)" != "$commit" ]]; then
	echo "test-times: the clone is not at $commit (commit your changes first)" >&2
	exit 1
fi
times="$tmp/times.tsv"
{
	echo "# commit ${commit:0:12}"
	echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# load_start $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$times"
now_ms() { local t="${EPOCHREALTIME/./}"; echo $((t / 1000)); }
# timed KEY COMMAND... runs COMMAND in the clone with empty caches of the
# run's own, and records "# KEY wall_ms cpu_ms". It is the README's quick
# check, run as a user runs it: a test whose server is missing skips.
timed() {
	local key="$1" t0 cpu
	shift
	t0="$(now_ms)"
	cpu="$(
		cd "$tmp/clone"
		export GOCACHE="$tmp/gocache" GOMODCACHE="$tmp/gomodcache"
		TIMEFORMAT='%U %S'
		{ time "$@" >"$tmp/$key.log" 2>&1; } 2>&1 | awk '{ printf "%d", ($1 + $2) * 1000 }'
	)" || { cat "$tmp/$key.log"; return 1; }
	echo "# $key $(($(now_ms) - t0)) $cpu" >>"$times"
}
timed gotest_fresh go test ./...
timed gotest_warm go test ./...
# test.sh's own steps, and its wall time as a whole (the release check
# runs beside the tests, so the steps do not add up to it).
t0="$(now_ms)"
(
	cd "$tmp/clone"
	export GOCACHE="$tmp/gocache2" GOMODCACHE="$tmp/gomodcache2" FLOODGATE_REQUIRE_SERVERS=1 TEST_TIMES="$tmp/steps.tsv"
	scripts/test.sh >"$tmp/test.log" 2>&1
) || { tail -50 "$tmp/test.log"; exit 1; }
echo "# testsh_wall $(($(now_ms) - t0))" >>"$times"
cat "$tmp/steps.tsv" >>"$times"
echo "# load_end $(cut -d' ' -f1-3 /proc/loadavg)" >>"$times"
go -C benchmarks run ./cmd/report -suite testtimes -times "$times"
