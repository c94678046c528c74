#!/usr/bin/env bash
# Resolve kafka-shell 4.3.1 (kafka-metadata-shell, tools/java/shell/pom.xml) into .cache/java/shell-lib
# and print that directory; use it with .cache/java/lib: java -cp "lib/*:shell-lib/*" ...
# Idempotent (a stamp keyed by the pom's sha256), like scripts/java-deps.sh; leaves .cache/java/lib alone.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/tools/java/shell/pom.xml"
lib="$root/.cache/java/shell-lib"
stamp="$root/.cache/java/shell-lib.stamp"
want="$(sha256sum "$pom" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && compgen -G "$lib/kafka-shell-*.jar" >/dev/null; then
    echo "$lib"
    exit 0
fi
tmp="$root/.cache/java/shell-lib.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
mvn_args=(-q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime)
if [[ -n "${KBROKER_M2_REPO:-}" ]]; then
    mvn_args+=(-Dmaven.repo.local="$KBROKER_M2_REPO")
fi
if ! mvn "${mvn_args[@]}" >"$root/.cache/java/shell-mvn.log" 2>&1; then
    echo "java-shell-deps.sh: Maven resolution failed; see $root/.cache/java/shell-mvn.log" >&2
    tail -n 30 "$root/.cache/java/shell-mvn.log" >&2
    exit 1
fi
rm -rf "$lib"
mv "$tmp" "$lib"
echo "$want" >"$stamp"
echo "$lib"
