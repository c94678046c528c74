#!/usr/bin/env bash
# Debian packages kbroker's tests use (kcat, the librdkafka command-line client; valgrind; Prometheus, below). Idempotent and
# quiet: installs only what is missing, runs `apt-get update` once (only if something is missing),
# and needs root (CI and the dev machines run as root). Without root or apt it prints a warning
# and exits 0: tests that need a missing tool skip and say so.
set -uo pipefail

# Prometheus (the metrics tests scrape kbroker with a real server, tests/metrics/test_prometheus_server.py):
# Debian's package, pinned by version and checksum, its binary extracted into .cache/prometheus/<version>/
# (no installation, no root needed). From `apt-get download` where apt knows the version, else from the
# Debian mirror's pool.
PROMETHEUS_DEB_VERSION="2.42.0+ds-5+deb12u1"
PROMETHEUS_DEB_SHA256="81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55"
fetch_prometheus() {
    local root dest tmp deb
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    dest="$root/.cache/prometheus/$PROMETHEUS_DEB_VERSION"
    [[ -x "$dest/prometheus" ]] && return 0
    echo "system-deps.sh: fetching Debian's prometheus $PROMETHEUS_DEB_VERSION into .cache/prometheus/" >&2
    tmp="$(mktemp -d)"
    deb="$tmp/prometheus_${PROMETHEUS_DEB_VERSION}_amd64.deb"
    if ! (cd "$tmp" && apt-get download -qq "prometheus=$PROMETHEUS_DEB_VERSION" >/dev/null 2>&1) \
            || [[ ! -f "$deb" ]]; then
        curl -fsSL -o "$deb" \
            "https://deb.debian.org/debian/pool/main/p/prometheus/prometheus_${PROMETHEUS_DEB_VERSION}_amd64.deb" \
            || { echo "system-deps.sh: WARNING: cannot download prometheus; its test will skip" >&2; rm -rf "$tmp"; return 0; }
    fi
    if ! echo "$PROMETHEUS_DEB_SHA256  $deb" | sha256sum -c --quiet -; then
        echo "system-deps.sh: WARNING: prometheus .deb checksum mismatch; not installed" >&2
        rm -rf "$tmp"; return 0
    fi
    if command -v dpkg-deb >/dev/null 2>&1; then
        dpkg-deb -x "$deb" "$tmp/x"
    else
        (cd "$tmp" && ar x "$deb" && mkdir -p x && tar -xf data.tar.* -C x)
    fi
    mkdir -p "$dest"
    cp "$tmp/x/usr/bin/prometheus" "$dest/prometheus"
    rm -rf "$tmp"
    echo "system-deps.sh: prometheus at .cache/prometheus/$PROMETHEUS_DEB_VERSION/prometheus" >&2
}
fetch_prometheus

# command -> Debian package (valgrind: the instruction counts of benchmarks/bench_request_cost.py and
# bench_produce_partitions.py, and their test)
declare -A wanted=([kcat]=kcat [valgrind]=valgrind)

missing=()
for cmd in "${!wanted[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${wanted[$cmd]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps.sh: WARNING: missing ${missing[*]} and cannot install (need root and apt-get);" \
         "tests needing them will skip" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
if apt-get update -qq >"$log" 2>&1 \
        && apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
    rm -f "$log"
    echo "system-deps.sh: installed ${missing[*]}"
else
    echo "system-deps.sh: WARNING: apt-get could not install ${missing[*]}; tests needing them will skip." \
         "apt output:" >&2
    tail -n 20 "$log" >&2
    rm -f "$log"
fi
exit 0
