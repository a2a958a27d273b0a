#!/usr/bin/env bash
# Runs every test of every module in this repository: go vet, the unit and
# integration tests with the race detector, then each fuzz target for a
# short while on top of its committed seed corpus. CI (.ci/run) runs exactly
# this script.
#
#   FUZZTIME=30s scripts/test.sh        # fuzz longer
#   FLOODGATE_REQUIRE_SERVERS=1 ...     # fail instead of skip when a test
#                                       # server (redis-server) is missing
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-3s}"

modules=()
for mod in . redisstore benchmarks contrib/prommetrics contrib/otelmetrics contrib/grpclimit contrib/ginlimit; do
	[[ -f "$mod/go.mod" ]] && modules+=("$mod")
done

for mod in "${modules[@]}"; do
	echo "== module $mod: tidy, vet and test"
	# A nested module requires the root at its release version, which the
	# module proxy does not have before it is tagged: go.work points those
	# requirements at this checkout, and "go mod tidy" (which ignores go.work)
	# can only check the root module.
	if [[ "$mod" == . ]]; then (go mod tidy -diff); fi
	(cd "$mod" && go vet ./... && go test -race -shuffle=on -timeout 10m ./...)
done

for mod in "${modules[@]}"; do
	(cd "$mod"
	# go test -list prints each package's matching names, then "ok <pkg>".
	go test -run '^$' -list '^Fuzz' ./... | awk '
		/^Fuzz/ { names[n++] = $1; next }
		/^ok / { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }
	' | while read -r pkg name; do
		echo "== fuzz $pkg $name for $fuzztime"
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
	done)
done
echo "all tests passed"
