#!/usr/bin/env bash
# Prints the directory of every Go module in this repository, one a line:
# "." first, then the nested modules in order. A module is a directory with
# a go.mod, except under testdata, vendor, or a directory whose name starts
# with "." or "_" (the go command ignores those too). scripts/test.sh,
# scripts/release-check.sh and the public workflow all iterate over this
# list, so a new module needs no edit to any of them.
#
#   scripts/modules.sh [DIR]     # DIR defaults to the repository root
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
echo .
find . -mindepth 2 \
	\( -type d \( -name testdata -o -name vendor -o -name '.*' -o -name '_*' \) -prune \) \
	-o -type f -name go.mod -print |
	sed -e 's|^\./||' -e 's|/go.mod$||' | LC_ALL=C sort
