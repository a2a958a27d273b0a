#!/usr/bin/env bash
# Runs every test of every module in this repository: the release check
# (every module installs with "go get" from a proxy), then per module the
# go.mod/go.sum tidiness check, go vet and the unit and integration tests
# with the race detector, then each fuzz target for a short while on top of
# its committed seed corpus. Each step prints its duration, and a summary
# with the total closes the run. CI (.ci/run) runs exactly this script.
#
#   FUZZTIME=200000x scripts/test.sh    # fuzz longer (executions)
#   FLOODGATE_REQUIRE_SERVERS=1 ...     # fail instead of skip when a test
#                                       # server (redis-server) is missing
#
# The modules are every go.mod in the repository (scripts/modules.sh), so a
# new module needs no edit here; it must be in go.work.
set -euo pipefail
cd "$(dirname "$0")/.."
# A count of executions, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure
# when the deadline races a busy worker (go.dev/issue/75804, fixed in Go
# 1.27); a count has no deadline to race. 20,000 runs take 1-20 s a target.
fuzztime="${FUZZTIME:-20000x}"
mapfile -t modules < <(scripts/modules.sh)

tmp="$(mktemp -d)"

# Step bookkeeping: each step prints "== name", then "-- name: 12.3s";
# the summary lists them all with the total, and names the failing step
# when one fails.
now_ms() { local t="${EPOCHREALTIME/./}"; echo $((t / 1000)); }
fmt_ms() { printf '%d.%ds' $(($1 / 1000)) $(($1 % 1000 / 100)); }
start_ms="$(now_ms)"
summary=()
current=""
step() {
	current="$1"
	shift
	echo "== $current"
	local t0
	t0="$(now_ms)"
	"$@"
	local dt=$(($(now_ms) - t0))
	echo "-- $current: $(fmt_ms "$dt")"
	summary+=("$(printf '%9s  %s' "$(fmt_ms "$dt")" "$current")")
	current=""
}
finish() {
	local rc=$?
	echo
	echo "== summary"
	printf '%s\n' "${summary[@]}"
	if [[ -n "$current" ]]; then
		echo "FAILED in step: $current"
	fi
	printf '%9s  total\n' "$(fmt_ms $(($(now_ms) - start_ms)))"
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
	exit "$rc"
}
# Module caches are read-only by design: chmod makes them removable.
trap finish EXIT

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

step "workspace: every module in go.work" check_workspace
step "release check: go get every module from a proxy" \
	env RELEASE_PROXY_DIR="$tmp/proxy" scripts/release-check.sh --worktree

for mod in "${modules[@]}"; do
	# Nested modules are checked against the release check's proxy.
	step "module $mod: tidy" env RELEASE_PROXY_DIR="$tmp/proxy" scripts/tidy.sh -diff "$mod"
	step "module $mod: vet" go -C "$mod" vet ./...
	step "module $mod: test -race" go -C "$mod" test -race -shuffle=on -timeout 10m ./...
done

for mod in "${modules[@]}"; do
	# go test -list prints each package's matching names, then "ok <pkg>".
	go -C "$mod" test -run '^$' -list '^Fuzz' ./... | awk '
		/^Fuzz/ { names[n++] = $1; next }
		/^ok / { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }
	' >"$tmp/fuzz"
	while read -r pkg name <&3; do
		step "fuzz $pkg $name for $fuzztime" \
			go -C "$mod" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
	done 3<"$tmp/fuzz"
done
echo
echo "all tests passed"
