#!/usr/bin/env bash
# The reference broker: a single-node Apache Kafka 4.3.1 (KRaft, combined broker+controller) from
# the jars that scripts/java-deps.sh resolves. Differential tests, golden captures and benchmarks
# compare kbroker against it. Its server.properties mirrors kbroker's defaults.
#
#   kafka.sh start  [--dir D] [--port N] [--controller-port N] [--advertised-port N]
#                   [--override KEY=VALUE]... [--timeout S]
#   kafka.sh stop   [--dir D]
#   kafka.sh status [--dir D]
#
# start formats D/data on first use (random cluster id), starts kafka.Kafka in the background
# (heap: $KAFKA_HEAP_OPTS, default -Xmx1G -Xms1G as in Kafka's own scripts), waits until a Metadata
# request lists the broker, and prints `bootstrap=127.0.0.1:PORT`. Ports default to free ones.
# --advertised-port makes clients come back through another port (the golden-capture proxy).
# Logs: D/logs/server.log (log4j2) and D/logs/stdout.log. State: D/kafka.env, D/kafka.pid.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/benchmarks/reference"

cmd="${1:-}"
[[ -n "$cmd" ]] && shift
dir="$root/.cache/reference-kafka"
port=""
cport=""
aport=""
timeout=120
overrides=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dir) dir="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --controller-port) cport="$2"; shift 2 ;;
        --advertised-port) aport="$2"; shift 2 ;;
        --override) overrides+=("$2"); shift 2 ;;
        --timeout) timeout="$2"; shift 2 ;;
        *) echo "kafka.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
pidfile="$dir/kafka.pid"

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

running_pid() {
    [[ -f "$pidfile" ]] || return 1
    local pid
    pid="$(cat "$pidfile")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

do_start() {
    if pid="$(running_pid)"; then
        echo "kafka.sh: already running (pid $pid); $(grep '^BOOTSTRAP=' "$dir/kafka.env" | sed 's/^BOOTSTRAP=/bootstrap=/')" >&2
        grep '^BOOTSTRAP=' "$dir/kafka.env" | sed 's/^BOOTSTRAP=/bootstrap=/'
        return 0
    fi
    local lib
    lib="$("$root/scripts/java-deps.sh")"
    [[ -n "$port" ]] || port="$(free_port)"
    [[ -n "$cport" ]] || cport="$(free_port)"
    while [[ "$cport" == "$port" ]]; do cport="$(free_port)"; done
    [[ -n "$aport" ]] || aport="$port"
    mkdir -p "$dir/data" "$dir/logs"

    cat >"$dir/server.properties" <<PROPS
# Written by benchmarks/reference/kafka.sh: single-node KRaft, settings matching kbroker's defaults.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$aport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
log.segment.bytes=1073741824
log.retention.hours=168
log.retention.check.interval.ms=300000
# No per-message fsync: Kafka's default (log.flush.interval.messages=Long.MAX_VALUE) is kept.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
PROPS
    local kv
    for kv in "${overrides[@]+"${overrides[@]}"}"; do
        echo "$kv" >>"$dir/server.properties"
    done

    cat >"$dir/log4j2.properties" <<LOG
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $dir/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
LOG

    local java_opts=(${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
        -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
        "-Dlog4j2.configurationFile=$dir/log4j2.properties" "-Dkafka.logs.dir=$dir/logs")

    if [[ ! -f "$dir/data/meta.properties" ]]; then
        local cluster_id
        # Never a leading '-' (kafka-storage would read the id as an option; Kafka's Uuid.randomUuid
        # avoids it the same way): about 1 id in 64 did, and the reference broker failed to start.
        cluster_id="$(python3 -c 'import base64,uuid
while True:
    u = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not u.startswith("-"):
        print(u)
        break')"
        java -Xmx256m "-Dlog4j2.configurationFile=$root/tools/java/log4j2-tools.properties" \
            -cp "$lib/*" kafka.tools.StorageTool format -t "$cluster_id" \
            -c "$dir/server.properties" >"$dir/logs/format.log" 2>&1 \
            || { echo "kafka.sh: storage format failed:" >&2; cat "$dir/logs/format.log" >&2; exit 1; }
    fi

    setsid nohup java "${java_opts[@]}" -cp "$lib/*" kafka.Kafka "$dir/server.properties" \
        >"$dir/logs/stdout.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$pidfile"
    {
        echo "PID=$pid"
        echo "PORT=$port"
        echo "CONTROLLER_PORT=$cport"
        echo "ADVERTISED_PORT=$aport"
        echo "BOOTSTRAP=127.0.0.1:$port"
    } >"$dir/kafka.env"

    local deadline=$((SECONDS + timeout))
    until python3 "$here/metadata_probe.py" 127.0.0.1 "$port" 2 >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "kafka.sh: kafka.Kafka exited during start-up; last log lines:" >&2
            tail -n 40 "$dir/logs/stdout.log" "$dir/logs/server.log" >&2 2>/dev/null || true
            rm -f "$pidfile"
            exit 1
        fi
        if (( SECONDS >= deadline )); then
            echo "kafka.sh: broker not ready after ${timeout}s; stopping it (logs in $dir/logs)" >&2
            do_stop >/dev/null
            exit 1
        fi
        sleep 0.5
    done
    echo "bootstrap=127.0.0.1:$port"
}

do_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$pidfile"
        echo "stopped"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null; do
        if (( SECONDS >= deadline )); then
            echo "kafka.sh: pid $pid ignored SIGTERM for 60s; killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.2
    done
    rm -f "$pidfile"
    echo "stopped"
}

do_status() {
    local pid
    if pid="$(running_pid)"; then
        echo "running pid=$pid $(grep '^BOOTSTRAP=' "$dir/kafka.env" | sed 's/^BOOTSTRAP=/bootstrap=/')"
    else
        echo "not running"
        return 3
    fi
}

case "$cmd" in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    *) echo "usage: kafka.sh start|stop|status [--dir D] [--port N] [--advertised-port N] [--override K=V]" >&2; exit 2 ;;
esac
