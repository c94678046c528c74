#!/usr/bin/env bash
# Builds kbench, the native load generator of the side-by-side benchmarks (benchmarks/native/kbench),
# and prints the path of the binary. Cached: .cache/kbench/kbench-<sha256 of the sources> is reused
# until a .go source, go.mod, go.sum or this script change; a fresh build also runs its Go unit tests.
#
# Pinned: the Go toolchain is the machine's (`go version` is printed into the cache's build log);
# the one dependency, github.com/twmb/franz-go, is pinned by version in go.mod and by checksum in
# go.sum (verified by `go` against the module's hash on download, -mod=readonly so nothing is
# resolved anew). Modules are downloaded through the Go module proxy into .cache/kbench/gomod.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$root/benchmarks/native/kbench"
cache="$root/.cache/kbench"
mkdir -p "$cache"
sum="$(cat "$src"/*.go "$src/go.mod" "$src/go.sum" "$0" | sha256sum | cut -c1-16)"  # and this script
bin="$cache/kbench-$sum"
if [[ ! -x "$bin" ]]; then
    command -v go >/dev/null || { echo "build.sh: no Go toolchain on PATH (go >= 1.26 needed: franz-go v1.22 asks for it)" >&2; exit 1; }
    {
        go version
        cd "$src"
        GOMODCACHE="$cache/gomod" GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
            go build -trimpath -o "$bin.tmp" .
        # Its unit tests (the latency histogram) with the same settings, so a broken build never lands
        # in the cache; tests/benchmarks/test_bench_run.py runs them again (then from Go's build cache).
        GOMODCACHE="$cache/gomod" GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
            go test -count=1 .
    } >"$cache/build.log" 2>&1 || { cat "$cache/build.log" >&2; exit 1; }
    mv "$bin.tmp" "$bin"
fi
echo "$bin"
