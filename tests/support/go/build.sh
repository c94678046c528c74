#!/usr/bin/env bash
# Builds one of the tests' Go programs (tests/support/go/<name>: its own module, franz-go pinned to
# the version kbench uses, by version in go.mod and by checksum in go.sum) and prints the binary's
# path. Cached: .cache/go-tests/<name>-<sha256 of the sources> is reused until a source, go.mod,
# go.sum or this script changes. Modules come from .cache/kbench/gomod, the module cache
# benchmarks/native/build.sh fills (the same franz-go: nothing new to download once kbench is
# built; otherwise through the Go module proxy), -mod=readonly so nothing is resolved anew.
#
#   bash tests/support/go/build.sh txnsession
set -euo pipefail
name="${1:?usage: build.sh <program under tests/support/go>}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
src="$root/tests/support/go/$name"
[[ -f "$src/go.mod" ]] || { echo "build.sh: no Go module at $src" >&2; exit 1; }
cache="$root/.cache/go-tests"
mkdir -p "$cache"
sum="$(cat "$src"/*.go "$src/go.mod" "$src/go.sum" "$0" | sha256sum | cut -c1-16)"
bin="$cache/$name-$sum"
if [[ ! -x "$bin" ]]; then
    command -v go >/dev/null || { echo "build.sh: no Go toolchain on PATH (go >= 1.26 needed: franz-go v1.22 asks for it)" >&2; exit 1; }
    {
        go version
        cd "$src"
        GOMODCACHE="$root/.cache/kbench/gomod" GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
            go build -trimpath -o "$bin.tmp.$$" .
    } >"$cache/$name-build.log" 2>&1 || { cat "$cache/$name-build.log" >&2; exit 1; }
    mv "$bin.tmp.$$" "$bin"
fi
echo "$bin"
