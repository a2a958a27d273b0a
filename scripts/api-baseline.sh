#!/usr/bin/env bash
# Makes a release the baseline that scripts/api-check.sh holds every
# module's API to: writes each module's exported API at that release as
# apidiff export data (api/VERSION.zip in the module's directory, built
# with -trimpath, so the same commit always gives the same bytes) and
# api/baseline.txt, removing the previous baseline's files.
#
#   scripts/api-baseline.sh VERSION COMMIT    # e.g. v0.3.0 v0.3.0
#   scripts/api-baseline.sh                   # rewrite the current one
#                                             # from the commit it names
#
# COMMIT must be in this clone (a shallow clone may lack it: git fetch
# --unshallow). The commit's modules are built in a copy of it with its
# own go.work, so third-party modules come from the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
apidiff_version="$(sed -n 's/^apidiff_version=//p' scripts/api-check.sh)"
if (($# == 0)); then
	read -r _ version commit < <(grep '^version ' api/baseline.txt)
	set -- "$version" "$commit"
fi
if (($# != 2)); then
	echo "usage: scripts/api-baseline.sh [VERSION COMMIT]" >&2
	exit 2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GOFLAGS= GOBIN="$tmp" go install "golang.org/x/exp/cmd/apidiff@$apidiff_version"
go run ./internal/apicheck -apidiff "$tmp/apidiff" write "$1" "$2"
