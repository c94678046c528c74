#!/usr/bin/env bash
# Resolve the pinned Apache Kafka 4.3.1 jars (clients, tools, broker; see tools/java/pom.xml) into
# .cache/java/lib and print that directory. Idempotent: a stamp file keyed by the pom's sha256
# skips Maven entirely when the jars are already there. Works on a clean clone (Maven downloads
# into ~/.m2, or into $KBROKER_M2_REPO when set).
#
# Usage: scripts/java-deps.sh [--force] [--streams]   prints the absolute path of the lib directory
#        (--streams: Kafka Streams 4.3.1 of tools/java/streams/pom.xml, in .cache/java/streams-lib)
#        java -cp "$(scripts/java-deps.sh)/*" org.apache.kafka.tools.TopicCommand ...
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/tools/java/pom.xml"
lib="$root/.cache/java/lib"
stamp="$root/.cache/java/lib.stamp"
probe="kafka-clients-*.jar"
mvnlog="$root/.cache/java/mvn.log"

force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        # Kafka Streams 4.3.1 (tools/java/streams/pom.xml) into a directory of its own, used beside lib.
        --streams) pom="$root/tools/java/streams/pom.xml"; lib="$root/.cache/java/streams-lib"
                   stamp="$root/.cache/java/streams-lib.stamp"; probe="kafka-streams-*.jar"
                   mvnlog="$root/.cache/java/streams-mvn.log" ;;
    esac
done

for tool in java mvn sha256sum; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "java-deps.sh: '$tool' not found on PATH (need Java 17+ and Maven 3.8+)" >&2
        exit 2
    fi
done

want="$(sha256sum "$pom" | cut -d' ' -f1)"
if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
        && compgen -G "$lib/$probe" >/dev/null; then
    echo "$lib"
    exit 0
fi

# Copy into a fresh directory and swap it in, so a stale jar from an older pin never lingers on
# the classpath and an interrupted run never leaves a half-filled lib that the stamp vouches for.
tmp="$root/.cache/java/lib.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

mvn_args=(-q -B -f "$pom" dependency:copy-dependencies
          -DoutputDirectory="$tmp" -DincludeScope=runtime)
if [[ -n "${KBROKER_M2_REPO:-}" ]]; then
    mvn_args+=(-Dmaven.repo.local="$KBROKER_M2_REPO")
fi
echo "java-deps.sh: resolving Apache Kafka's Java jars with Maven into .cache/java (the first run downloads them: minutes; later runs are instant)" >&2
if ! mvn "${mvn_args[@]}" >"$mvnlog" 2>&1; then
    echo "java-deps.sh: Maven resolution failed; see $mvnlog" >&2
    tail -n 30 "$mvnlog" >&2
    exit 1
fi

rm -rf "$lib"
mv "$tmp" "$lib"
echo "$want" >"$stamp"
echo "$lib"
