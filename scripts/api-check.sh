#!/usr/bin/env bash
# Holds every module's exported API to the last release's: an
# incompatible change that apidiff (golang.org/x/exp/cmd/apidiff) finds
# fails unless MIGRATING.md names it (internal/apicheck says how).
#
#   scripts/api-check.sh
#
# The last release's API is committed as export data (api/baseline.txt
# names the release and its commit; each module has api/vX.Y.Z.zip), so
# the check needs no tag, no history and no network but the Go module
# proxy, which serves apidiff at the pinned version below.
# scripts/api-baseline.sh writes that export data from a release commit.
#
# It first runs the checker's own test of a broken case (a small module
# whose tree breaks its release, checked against a MIGRATING.md that
# leaves a change unnamed, then names it), then the check of this tree.
#
# apidiff loads each module's packages through "go list -export": with
# API_CHECK_GOFLAGS (default -race) they are the race build that
# scripts/test.sh's test step has just compiled, so the build cache has
# them. Set it empty to check without the race detector's build.
set -euo pipefail
cd "$(dirname "$0")/.."
# golang.org/x/exp has no releases: a pseudo-version, pinned.
apidiff_version=v0.0.0-20261113113407-e3970619a1a4
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GOFLAGS= GOBIN="$tmp" go install "golang.org/x/exp/cmd/apidiff@$apidiff_version"
export APIDIFF="$tmp/apidiff"
go test -count=1 -run '^TestCheckFailsOnUnnamedChange$' ./internal/apicheck
GOFLAGS="${API_CHECK_GOFLAGS--race}" go run ./internal/apicheck -apidiff "$APIDIFF" check
