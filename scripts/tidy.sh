#!/usr/bin/env bash
# Runs "go mod tidy" in modules of this repository (default: all of them),
# or with -diff only checks that they are tidy, as scripts/test.sh does.
#
#   scripts/tidy.sh                 # tidy every module
#   scripts/tidy.sh -diff redisstore
#
# The root module is tidied as usual. A nested module requires the other
# modules of this repository at their release version, which no public
# proxy has before the tag: it is tidied outside the workspace against a
# proxy that serves them, built from the working tree by
# scripts/release-check.sh (or taken from RELEASE_PROXY_DIR if that holds
# one already), with a module cache of its own (RELEASE_MODCACHE, the
# release check's, when scripts/test.sh sets it; else a temporary one) so
# the unreleased versions never reach yours. Their go.sum lines are dropped: their hashes are only
# known once the tag exists, and a user's build never reads a dependency's
# go.sum.
set -euo pipefail
cd "$(dirname "$0")/.."
diff=()
if [[ "${1:-}" == -diff ]]; then
	diff=(-diff)
	shift
fi
if (($# > 0)); then modules=("$@"); else mapfile -t modules < <(scripts/modules.sh); fi
root_path="$(GOWORK=off go list -m)"
# A go.sum line of an in-repo module at a release version.
in_repo_sum="^${root_path//./\\.}(/[^ ]+)? v[0-9]+\.[0-9]+\.[0-9]+(/go\.mod)? h1:"

tmp="$(mktemp -d)"
trap 'chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
proxy="${RELEASE_PROXY_DIR:-}"
for mod in "${modules[@]}"; do
	if [[ "$mod" == . ]]; then
		go mod tidy "${diff[@]}"
		continue
	fi
	if [[ -z "$proxy" ]]; then
		proxy="$tmp/proxy"
		RELEASE_PROXY_DIR="$proxy" scripts/release-check.sh --worktree >/dev/null
	fi
	rc=0
	out="$(cd "$mod" && GOWORK=off GOFLAGS=-mod=mod GOSUMDB=off GOMODCACHE="${RELEASE_MODCACHE:-$tmp/modcache}" \
		GOPROXY="file://$proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" \
		GOPRIVATE='' GONOPROXY='' GONOSUMDB='' go mod tidy "${diff[@]}" 2>"$tmp/err")" || rc=$?
	if ((${#diff[@]} == 0)); then
		if ((rc != 0)); then
			cat "$tmp/err" >&2
			exit "$rc"
		fi
		grep -vE "$in_repo_sum" "$mod/go.sum" >"$tmp/go.sum" || true
		cat "$tmp/go.sum" >"$mod/go.sum"
		continue
	fi
	((rc == 0)) && continue
	if [[ -z "$out" ]]; then # an error, not a difference
		cat "$tmp/err" >&2
		exit 1
	fi
	# Every changed line other than the in-repo modules' sums is a real
	# difference.
	unexpected="$(grep -E '^[+-]' <<<"$out" | grep -vE '^(\+\+\+|---) ' | sed 's/^[+-]//' |
		grep -vE "$in_repo_sum" || true)"
	if [[ -n "$unexpected" ]]; then
		echo "$out" >&2
		echo "$mod is not tidy: run scripts/tidy.sh $mod" >&2
		exit 1
	fi
done
