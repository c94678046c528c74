#!/usr/bin/env bash
# Debian packages kbroker's tests use (kcat, the librdkafka command-line client). Idempotent and
# quiet: installs only what is missing, runs `apt-get update` once (only if something is missing),
# and needs root (CI and the dev machines run as root). Without root or apt it prints a warning
# and exits 0: tests that need a missing tool skip and say so.
set -uo pipefail

# command -> Debian package
declare -A wanted=([kcat]=kcat)

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
