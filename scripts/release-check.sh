#!/usr/bin/env bash
# Proves that a commit installs the way a user installs it: with "go get"
# through a module proxy, with no go.work and no replace directives.
#
#   scripts/release-check.sh [COMMIT]      # default HEAD
#   scripts/release-check.sh --worktree    # the working tree as it is now
#                                          # (tracked and untracked files,
#                                          # minus .gitignore'd ones)
#
# It copies the commit into a temporary git repository and tags it the way
# a release is tagged (RELEASING.md): vX.Y.Z for the root module and
# <dir>/vX.Y.Z for each nested module. The go command itself then fetches
# every module from that repository (git's url.insteadOf maps the module's
# github.com address onto it) and so builds the module zips exactly as the
# public proxy would — nested modules and vendor directories left out of
# their parent's zip, .info/.mod/.zip as served. Those files become a
# file-based GOPROXY. Then, for each module, a fresh consumer module (their
# module cache empty at the start of the check, and shared among them),
# GOPROXY=file://<that proxy>,<the real proxy>,
# GOSUMDB=off, GOFLAGS=-mod=mod and GOWORK=off runs "go get module@vX.Y.Z",
# builds every package of the module and runs a small program that imports
# each of its public packages.
#
# Before any of that it checks the rules that make a tag installable: every
# go.mod's module path matches its directory, no go.mod has a replace
# directive, and every nested module requires the in-repo modules at
# exactly the release version (the modules are released in lockstep; see
# RELEASING.md for why redisstore must be). A module zip holding a file
# over 1 MiB (a stray binary) is refused too.
#
# Environment:
#   VERSION            the version to tag (default: the version the nested
#                      modules require of the root module)
#   RELEASE_PROXY_DIR  keep the built proxy in this directory (test.sh uses
#                      it for its "go mod tidy" check of nested modules)
#   RELEASE_MODCACHE   the consumers' module cache (default: a temporary
#                      one); test.sh shares it with that tidy check. It
#                      must not be your own module cache, since it receives
#                      the unreleased versions of the in-repo modules.
set -euo pipefail
cd "$(dirname "$0")/.."
root_path="$(go mod edit -json | sed -n 's/^\t\t"Path": "\(.*\)"$/\1/p' | head -n1)"
if [[ -z "$root_path" ]]; then
	echo "release-check: cannot read the root module path from go.mod" >&2
	exit 1
fi

source="${1:-HEAD}"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "release-check: needs a git checkout of the repository (it tags a copy of a commit)" >&2
	exit 1
fi
work="$(mktemp -d)"
cleanup() {
	# The module cache is read-only by design; make it removable.
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Snapshot the source into $work/repo.
mkdir "$work/repo"
if [[ "$source" == --worktree ]]; then
	git ls-files -z --cached --others --exclude-standard |
		tar --null --files-from=- --ignore-failed-read -c 2>/dev/null |
		tar -x -C "$work/repo"
	what="the working tree"
else
	commit="$(git rev-parse --verify "$source^{commit}")"
	git archive --format=tar "$commit" | tar -x -C "$work/repo"
	what="commit ${commit:0:12}"
fi

mapfile -t modules < <(scripts/modules.sh "$work/repo")

# Every nested module requires the root at the release version: that is
# the version to tag.
version="${VERSION:-}"
for mod in "${modules[@]:1}"; do
	v="$(cd "$work/repo/$mod" && go mod edit -json |
		awk -v p="\"$root_path\"," '$1 == "\"Path\":" && $2 == p { getline; gsub(/[",]/, "", $2); print $2 }')"
	if [[ -z "$version" ]]; then version="$v"; fi
done
if [[ -z "$version" ]]; then
	echo "release-check: set VERSION (no nested module requires the root module)" >&2
	exit 1
fi
echo "release-check: $what as $version; modules: ${modules[*]}"

# The rules a tag needs.
fail=0
for mod in "${modules[@]}"; do
	json="$(cd "$work/repo/$mod" && go mod edit -json)"
	want="$root_path"
	[[ "$mod" == . ]] || want="$root_path/$mod"
	got="$(sed -n '/"Module": {/,/}/s/^\t\t"Path": "\(.*\)"$/\1/p' <<<"$json")"
	if [[ "$got" != "$want" ]]; then
		echo "release-check: $mod/go.mod declares module $got, want $want (its directory)" >&2
		fail=1
	fi
	if grep -q '"Replace": \[' <<<"$json"; then
		echo "release-check: $mod/go.mod has a replace directive; a user's build ignores it (develop with go.work instead)" >&2
		fail=1
	fi
	# Requirements on in-repo modules, as "path version" lines.
	while read -r path v; do
		if [[ "$v" != "$version" ]]; then
			echo "release-check: $mod/go.mod requires $path $v; in-repo modules are released together, want $version" >&2
			fail=1
		fi
	done < <(awk -v root="$root_path" '
		$1 == "\"Path\":" { gsub(/[",]/, "", $2); path = $2; next }
		$1 == "\"Version\":" && (path == root || index(path, root "/") == 1) { gsub(/[",]/, "", $2); print path, $2 }
	' <<<"$(sed -n '/"Require": \[/,/\]/p' <<<"$json")")
done
((fail == 0)) || exit 1

# Tag the snapshot as a release.
git_quiet=(git -C "$work/repo" -c user.name=release-check -c user.email=release-check@localhost -c init.defaultBranch=main)
"${git_quiet[@]}" init -q
"${git_quiet[@]}" add -A
"${git_quiet[@]}" commit -q -m "release-check snapshot of $what"
tags=()
for mod in "${modules[@]}"; do
	if [[ "$mod" == . ]]; then tags+=("$version"); else tags+=("$mod/$version"); fi
	"${git_quiet[@]}" tag "${tags[-1]}"
done

# Let the go command fetch the tags from the snapshot: its git runs with a
# private config that maps the module's https address onto the local
# repository. Only our modules are fetched here, all directly (GOPRIVATE).
cat >"$work/gitconfig" <<EOF
[url "file://$work/repo"]
	insteadOf = https://$root_path
[protocol "file"]
	allow = always
EOF
paths=()
for mod in "${modules[@]}"; do
	if [[ "$mod" == . ]]; then paths+=("$root_path"); else paths+=("$root_path/$mod"); fi
done
mkdir "$work/empty"
(cd "$work/empty" && env -u GIT_DIR -u GIT_WORK_TREE -u GIT_INDEX_FILE \
	GIT_CONFIG_GLOBAL="$work/gitconfig" GIT_CONFIG_NOSYSTEM=1 \
	GOMODCACHE="$work/produce" GOPRIVATE="$root_path" GOPROXY=direct \
	GOSUMDB=off GOWORK=off GOFLAGS= GOTOOLCHAIN=local \
	go mod download "${paths[@]/%/@$version}")

# The proxy serves exactly what the go command fetched: .info, .mod and
# .zip per version, and a list of versions per module.
proxy="${RELEASE_PROXY_DIR:-$work/proxy}"
mkdir -p "$proxy"
for path in "${paths[@]}"; do
	from="$work/produce/cache/download/$path/@v"
	mkdir -p "$proxy/$path/@v"
	cp "$from/$version.info" "$from/$version.mod" "$from/$version.zip" "$proxy/$path/@v/"
	echo "$version" >"$proxy/$path/@v/list"
	# A file this large in a module of Go sources is a build artifact or a
	# data file that every user would download: refuse it.
	big="$(find "$work/produce/$path@$version" -type f -size +1M -printf '%P (%s bytes)\n')"
	if [[ -n "$big" ]]; then
		echo "release-check: $path@$version would ship files over 1 MiB:" >&2
		echo "$big" >&2
		exit 1
	fi
	printf '  %-55s zip %6d KiB, %4d files\n' "$path@$version" \
		$(($(stat -c %s "$from/$version.zip") / 1024)) \
		"$(find "$work/produce/$path@$version" -type f | wc -l)"
done

# Third-party modules come from the real proxy. The local module cache,
# when there is one, is tried first as a read-only mirror of it: the same
# files, without the network.
fallback="$(go env GOPROXY)"
if [[ "$fallback" == off ]]; then
	echo "release-check: GOPROXY=off; third-party modules need a proxy" >&2
	exit 1
fi
local_cache="$(go env GOMODCACHE)/cache/download"
consumer_proxy="file://$proxy"
[[ -d "$local_cache" ]] && consumer_proxy+=",file://$local_cache"
consumer_proxy+=",$fallback"

# One consumer module per module. They share one module cache, empty when
# the check starts (RELEASE_MODCACHE, if set, must be new or hold only
# what an earlier consumer put there): the in-repo modules in it can only
# have come from the proxy built above, exactly as a user's would, and a
# third-party module is downloaded once rather than once per consumer (the
# same files either way: a module cache holds what the proxy served).
now_ms() { local t="${EPOCHREALTIME/./}"; echo $((t / 1000)); }
for i in "${!paths[@]}"; do
	path="${paths[$i]}"
	dir="$work/consumer$i"
	mkdir -p "$dir"
	log="$dir/log"
	consumer=(env -C "$dir" GOPROXY="$consumer_proxy" GOSUMDB=off GOFLAGS="-mod=mod -trimpath"
		GOWORK=off GOMODCACHE="${RELEASE_MODCACHE:-$work/modcache}" GOPRIVATE= GONOPROXY= GONOSUMDB=
		GOTOOLCHAIN=local go)
	t0="$(now_ms)"
	if ! {
		"${consumer[@]}" mod init example.com/consumer &&
			"${consumer[@]}" get "$path@$version" &&
			"${consumer[@]}" list -f '{{if eq .Module.Path "'"$path"'"}}{{.ImportPath}} {{.Name}}{{end}}' "$path/..." >"$dir/packages"
	} >"$log" 2>&1; then
		cat "$log" >&2
		echo "release-check: go get $path@$version failed in a fresh module" >&2
		exit 1
	fi
	# A program that imports every package a user can import: not main,
	# not internal.
	{
		echo "package main"
		echo
		echo 'import ('
		echo '	"fmt"'
		awk '$2 != "main" && $1 !~ /(^|\/)internal(\/|$)/ { printf "\t_ \"%s\"\n", $1 }' "$dir/packages"
		echo ')'
		echo
		echo 'func main() { fmt.Println("imported") }'
	} >"$dir/main.go"
	if [[ "$path" == "$root_path" ]]; then
		# The root module also makes a decision, as its README shows.
		cat >"$dir/decide.go" <<EOF
package main

import (
	"context"
	"fmt"

	"$root_path"
)

func init() {
	lim, err := floodgate.NewTokenBucket(floodgate.PerMinute(1))
	if err != nil {
		panic(err)
	}
	a, _ := lim.Allow(context.Background(), "k")
	b, _ := lim.Allow(context.Background(), "k")
	fmt.Println("decisions:", a.Allowed, b.Allowed)
}
EOF
	fi
	t1="$(now_ms)"
	mapfile -t pkgs < <(cut -d' ' -f1 "$dir/packages")
	if ! {
		"${consumer[@]}" build "${pkgs[@]}" &&
			"${consumer[@]}" run . >"$dir/out"
	} >>"$log" 2>&1; then
		cat "$log" >&2
		echo "release-check: a program using $path@$version does not build or run" >&2
		exit 1
	fi
	if [[ "$path" == "$root_path" ]] && ! grep -qx 'decisions: true false' "$dir/out"; then
		echo "release-check: the root module's program decided wrongly: $(cat "$dir/out")" >&2
		exit 1
	fi
	t2="$(now_ms)"
	printf '  %-55s go get %ds, build of %d packages and run %ds: %s\n' "$path@$version" \
		$(((t1 - t0) / 1000)) "$(wc -l <"$dir/packages")" $(((t2 - t1) / 1000)) "$(tr '\n' ' ' <"$dir/out")"
done
echo "release-check: every module installs from a proxy at $version"
