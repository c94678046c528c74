#!/usr/bin/env bash
# kbroker's container entrypoint: renders server.properties from the environment, then execs
# `kbroker serve` (PID 1 is kbroker itself, so `docker stop`'s SIGTERM is a clean shutdown).
#
# Configuration, as the apache/kafka image takes it (its docker/resources/common-scripts/configure and
# utility render-properties), with KBROKER_ for KAFKA_:
#   - every environment variable KBROKER_<NAME> (except the excluded ones below) becomes one key:
#     the prefix is dropped, `___` becomes `-`, `__` becomes `_`, a single `_` becomes `.`, and the
#     key is lower-cased: KBROKER_LOG_DIRS -> log.dirs, KBROKER_LOG_RETENTION_MS -> log.retention.ms;
#   - a server.properties mounted at $KBROKER_MOUNTED_CONFIG_DIR/server.properties (default
#     /mnt/shared/config, Kafka's path) comes first and the environment's keys are appended to it;
#     with neither, the image's defaults (/etc/kbroker/server.properties) are used;
#   - KBROKER_LISTENERS unset but KBROKER_ADVERTISED_LISTENERS set: the listeners are the advertised
#     ones with every host replaced by 0.0.0.0 (as Kafka's image derives them).
# Excluded (settings of this script and of kbroker itself, not broker keys): KBROKER_OPTS (extra
# `kbroker serve` arguments, e.g. "--log-format json --log-level WARN"), KBROKER_CONFIG_DIR (where the
# rendered file goes), KBROKER_MOUNTED_CONFIG_DIR, KBROKER_DEFAULT_CONFIG, KBROKER_VERSION,
# KBROKER_EVENT_LOOP, KBROKER_NO_SKIP, KBROKER_BOOTSTRAP.
set -euo pipefail

config_dir="${KBROKER_CONFIG_DIR:-/opt/kbroker/config}"
mounted_dir="${KBROKER_MOUNTED_CONFIG_DIR:-/mnt/shared/config}"
default_config="${KBROKER_DEFAULT_CONFIG:-/etc/kbroker/server.properties}"
excluded=" KBROKER_OPTS KBROKER_CONFIG_DIR KBROKER_MOUNTED_CONFIG_DIR KBROKER_DEFAULT_CONFIG KBROKER_VERSION KBROKER_EVENT_LOOP KBROKER_NO_SKIP KBROKER_BOOTSTRAP "

# KBROKER_FOO___BAR__BAZ_QUX -> foo-bar_baz.qux
env_to_key() {
    local name="${1#KBROKER_}"
    name="${name//___/$'\x01'}"
    name="${name//__/$'\x02'}"
    name="${name//_/.}"
    name="${name//$'\x01'/-}"
    name="${name//$'\x02'/_}"
    printf '%s' "${name,,}"
}

if [[ -z "${KBROKER_LISTENERS:-}" && -n "${KBROKER_ADVERTISED_LISTENERS:-}" ]]; then
    KBROKER_LISTENERS="$(printf '%s' "$KBROKER_ADVERTISED_LISTENERS" | sed -e 's|://[^:]*:|://0.0.0.0:|g')"
    export KBROKER_LISTENERS
fi

rendered_env=""
while IFS= read -r var; do
    [[ "$var" == KBROKER_* ]] || continue
    [[ "$excluded" == *" $var "* ]] && continue
    rendered_env+="$(env_to_key "$var")=${!var}"$'\n'
done < <(compgen -e | LC_ALL=C sort)

mkdir -p "$config_dir"
target="$config_dir/server.properties"
if [[ -f "$mounted_dir/server.properties" ]]; then
    echo "kbroker entrypoint: using $mounted_dir/server.properties; keys from KBROKER_ variables are appended" >&2
    { cat "$mounted_dir/server.properties"; printf '\n# From KBROKER_ environment variables\n%s' "$rendered_env"; } >"$target"
elif [[ -n "$rendered_env" ]]; then
    { cat "$default_config"; printf '\n# From KBROKER_ environment variables\n%s' "$rendered_env"; } >"$target"
else
    cp "$default_config" "$target"
fi

# KBROKER_OPTS is split on whitespace on purpose (several flags in one variable).
# shellcheck disable=SC2086
exec kbroker serve "$target" ${KBROKER_OPTS:-} "$@"
