#!/usr/bin/env bash
# Runs every test of every module in this repository: go vet and the unit
# and integration tests of every module with the race detector (one go
# test -vet=all, so that each package compiles once), with the release
# check (every module installs with "go get" from a proxy) running beside
# them; then the go.mod/go.sum tidiness check of every module; then the
# API check (every module's exported API against the last release's,
# scripts/api-check.sh); then each fuzz target for a count of executions
# on top of its committed seed corpus. CI (.ci/run) runs exactly this
# script.
#
#   FUZZTIME=200000x scripts/test.sh    # fuzz longer (executions)
#   FLOODGATE_REQUIRE_SERVERS=1 ...     # fail instead of skip when a test
#                                       # server (redis-server, prometheus)
#                                       # is missing
#   TEST_TIMES=times.tsv ...            # also write the step times there
#
# Each step prints its duration; a summary closes the run with, for every
# step, its wall time, its CPU time (user + system of every process it
# ran: a figure that a busy machine changes far less than the wall time)
# and its budget, the wall time it may take on a fresh clone with empty
# Go caches on an idle 2-core machine. A step over its budget is marked
# in the summary, not failed: the budgets are for reading, the tests for
# failing.
#
# The modules are every go.mod in the repository (scripts/modules.sh), so a
# new module needs no edit here; it must be in go.work.
set -euo pipefail
cd "$(dirname "$0")/.."
# A count of executions, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure
# when the deadline races a busy worker (go.dev/issue/75804, fixed in Go
# 1.27); a count has no deadline to race.
fuzztime="${FUZZTIME:-20000x}"
mapfile -t modules < <(scripts/modules.sh)

tmp="$(mktemp -d)"
# The release check's proxy and module cache, shared with the tidy check:
# they hold the in-repo modules at their coming version, which must never
# reach your own module cache.
export RELEASE_PROXY_DIR="$tmp/proxy" RELEASE_MODCACHE="$tmp/modcache"

# Step bookkeeping: each step prints "== name", then "-- name: wall 12.3s,
# CPU 20.1s"; the summary lists them all with their budgets and the total,
# and names the failing step when one fails.
now_ms() { local t="${EPOCHREALTIME/./}"; echo $((t / 1000)); }
fmt_ms() { printf '%d.%ds' $(($1 / 1000)) $(($1 % 1000 / 100)); }
# cpu_now sets cpu to the user + system time, in ms, of every child
# process this shell has waited for (the second line of the times
# builtin). It must run in this shell, not in a command substitution,
# which would report its own subshell's children.
cpu_now() {
	times >"$tmp/times"
	cpu="$(tail -n1 "$tmp/times" | tr -d s |
		awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%d\n", t * 1000 }')"
}
start_ms="$(now_ms)"
cpu_now
start_cpu="$cpu"
summary=()
times_out="${TEST_TIMES:-}"
current=""
over=0
# step BUDGET NAME COMMAND... runs COMMAND as the step NAME, whose budget
# is BUDGET seconds of wall time.
step() {
	local budget="$1"
	current="$2"
	shift 2
	echo "== $current"
	local t0 c0
	t0="$(now_ms)"
	cpu_now
	c0="$cpu"
	"$@"
	cpu_now
	record "$budget" $(($(now_ms) - t0)) $((cpu - c0))
}
# record BUDGET WALL_MS CPU_MS reports the end of the current step.
record() {
	local budget="$1" dt="$2" dc="$3" mark=""
	if ((dt > budget * 1000)); then
		mark="  OVER BUDGET"
		over=$((over + 1))
	fi
	echo "-- $current: wall $(fmt_ms "$dt"), CPU $(fmt_ms "$dc")"
	summary+=("$(printf '%9s %9s %7s  %s%s' "$(fmt_ms "$dt")" "$(fmt_ms "$dc")" "${budget}s" "$current" "$mark")")
	[[ -z "$times_out" ]] || printf '%d\t%d\t%d\t%s\n' "$dt" "$dc" "$budget" "$current" >>"$times_out"
	current=""
}
# beside BUDGET NAME COMMAND... starts the step NAME in the background, to
# run beside the next steps (a compilation-heavy step beside tests that
# wait on servers keeps both cores busy); join_beside waits for it, then
# prints its output and reports it like any step. It runs in its own
# process group as a grandchild of this shell, which never waits for it:
# its CPU time, measured by bash's time in its subshell, counts in its own
# step and not in those it runs beside.
beside_dir="" beside_cpu=0
beside() {
	beside_budget="$1" beside_name="$2" beside_dir="$tmp/beside"
	shift 2
	mkdir -p "$beside_dir"
	echo "== $beside_name: started, beside the next steps"
	beside_t0="$(now_ms)"
	(
		setsid bash -c '
			dir="$1"
			shift
			TIMEFORMAT="%U %S"
			rc=0
			{ time "$@" >"$dir/log" 2>&1 || rc=$?; } 2>"$dir/cpu"
			t="${EPOCHREALTIME/./}"
			echo $((t / 1000)) >"$dir/end"
			echo "$rc" >"$dir/rc"
		' beside "$beside_dir" "$@" &
		echo $! >"$beside_dir/pid"
	)
}
join_beside() {
	current="$beside_name"
	echo "== $current: joining"
	while [[ ! -e "$beside_dir/rc" ]]; do sleep 0.2; done
	local rc dc
	rc="$(cat "$beside_dir/rc")"
	cat "$beside_dir/log"
	rm -f "$beside_dir/pid"
	((rc == 0)) || return "$rc"
	dc="$(awk '{ printf "%d\n", ($1 + $2) * 1000 }' "$beside_dir/cpu")"
	beside_cpu=$((beside_cpu + dc))
	record "$beside_budget" $(($(cat "$beside_dir/end") - beside_t0)) "$dc"
}
finish() {
	local rc=$?
	# A step still running beside the one that failed is stopped, with
	# its whole process group.
	if [[ -n "$beside_dir" && -e "$beside_dir/pid" ]]; then
		kill -- "-$(cat "$beside_dir/pid")" 2>/dev/null || true
		[[ -e "$beside_dir/rc" ]] || current="${current:-$beside_name}"
	fi
	echo
	echo "== summary: wall, CPU (user + system), budget (wall, fresh clone, idle 2 cores)"
	printf '%s\n' "${summary[@]}"
	if [[ -n "$current" ]]; then
		echo "FAILED in step: $current"
	fi
	cpu_now
	printf '%9s %9s %7s  total\n' "$(fmt_ms $(($(now_ms) - start_ms)))" \
		"$(fmt_ms $((cpu - start_cpu + beside_cpu)))" "${total_budget}s"
	((over == 0)) || echo "$over step(s) over budget: the machine was busy, or a step grew (docs/testing.md)"
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
	exit "$rc"
}
# Module caches are read-only by design: chmod makes them removable.
trap finish EXIT
[[ -z "$times_out" ]] || : >"$times_out"

# The fuzz targets, "module package name..." a line, found without
# compiling anything: go test -list would build every test binary
# without the race detector, a compilation nothing else needs.
find_fuzz_targets() {
	local mod pkg dir files
	for mod in "${modules[@]}"; do
		while read -r pkg dir files; do
			[[ -n "$files" ]] || continue
			# shellcheck disable=SC2086 # the file names have no spaces
			names="$(cd "$dir" && sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' $files)"
			[[ -z "$names" ]] || echo "$mod $pkg" $names
		done < <(go -C "$mod" list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./...)
	done
}
# A file, not a process substitution: the go list runs are waited for
# here, so that their CPU time counts before the first step, not in it.
find_fuzz_targets >"$tmp/fuzz"
mapfile -t fuzz_packages <"$tmp/fuzz"

# The budgets, in seconds of wall time on a fresh clone with empty module
# and build caches, on an idle 2-core machine. The total is that of the
# steps that run one after the other (the release check runs beside the
# tests), and leaves headroom under the 10 minutes docs/testing.md promises
# for the tests still to come. The test step covers the compilation of
# every module with the race detector, go vet and the tests. Measured on
# such a machine (2026-12-02): tests 422 s, release check 174 s beside
# them, tidy 2 s, fuzz builds 30 s and 2 s, each fuzz target 1 to 4 s;
# 479 s in all.
release_budget=300 tidy_budget=20 test_budget=430 fuzz_build_budget=40 fuzz_budget=5
# The API check: apidiff's build, and each module's packages loaded from
# the test step's race build (a leaf package the tests built only with
# its test files is compiled once more). Measured 2026-12-06 on a shallow
# clone after the test step's compilation with an empty build cache: 45 s
# of CPU (143 s of wall time niced at a load average of 15); run again
# with the cache warm, 4 s of CPU.
api_budget=60
total_budget=$((tidy_budget + test_budget + api_budget))
for line in "${fuzz_packages[@]}"; do
	read -r -a targets <<<"$line"
	total_budget=$((total_budget + fuzz_build_budget + (${#targets[@]} - 2) * fuzz_budget))
done

# Every module is developed in the workspace, so that nested modules build
# against this checkout rather than a published root.
check_workspace() {
	local used mod
	used="$(go work edit -json | awk '$1 == "\"DiskPath\":" { gsub(/[",]/, "", $2); sub(/^\.\//, "", $2); print $2 }')"
	for mod in "${modules[@]}"; do
		if ! grep -qx -- "$mod" <<<"$used"; then
			echo "module $mod is not in go.work: run go work use ./$mod" >&2
			return 1
		fi
	done
}

step 1 "workspace: every module in go.work" check_workspace
# The release check compiles every module without the race detector, in
# consumers outside the workspace: nothing the tests can share, so it
# runs beside them.
beside "$release_budget" "release check: go get every module from a proxy" scripts/release-check.sh --worktree

# Every module's packages in one go test (in the workspace, one build
# list): each package compiles once, go vet's analyzers run on that race
# build (-vet=all, every analyzer go vet runs), and the tests of one
# module run while the next compiles, so that a test that waits (a Redis
# failover, a server restart) leaves no core idle. Each package's line
# gives its test time.
patterns=()
for mod in "${modules[@]}"; do
	if [[ "$mod" == . ]]; then patterns+=(./...); else patterns+=("./$mod/..."); fi
done
step "$test_budget" "vet and test -race: every module" \
	go test -race -shuffle=on -vet=all -timeout 10m "${patterns[@]}"
join_beside
# Nested modules are checked against the release check's proxy and module
# cache.
step "$tidy_budget" "tidy: go.mod and go.sum of every module" scripts/tidy.sh -diff "${modules[@]}"
# After the test step, whose race build of every package apidiff loads.
step "$api_budget" "API: every module against the last release (apidiff, MIGRATING.md)" scripts/api-check.sh

# fuzz_package MODULE PKG NAME... builds PKG's test binary with the
# fuzzing instrumentation once, then fuzzes each target NAME with it in the
# package's directory, with go test's fuzz cache, as go test -fuzz would
# (which links the binary again for every target).
fuzz_package() {
	local mod="$1" pkg="$2" name bin dir cache
	shift 2
	bin="$tmp/fuzz-${pkg//\//_}.test"
	dir="$(go -C "$mod" list -f '{{.Dir}}' "$pkg")"
	cache="$(go env GOCACHE)/fuzz/$pkg"
	# -fuzz selects the instrumentation; any one target will do.
	step "$fuzz_build_budget" "fuzz $pkg: build" go -C "$mod" test -c -o "$bin" -fuzz "^$1\$" "$pkg"
	for name in "$@"; do
		step "$fuzz_budget" "fuzz $pkg $name for $fuzztime" \
			env -C "$dir" "$bin" -test.run='^$' -test.fuzz="^${name}\$" \
			-test.fuzztime="$fuzztime" -test.fuzzcachedir="$cache"
	done
}

for line in "${fuzz_packages[@]}"; do
	read -r -a targets <<<"$line"
	fuzz_package "${targets[@]}"
done
echo
echo "all tests passed"
