"""The `kbroker` command line: `kbroker serve [CONFIG] [--override K=V]...`, `kbroker storage
format|info|random-uuid` (kafka-storage.sh, `storage_tool.py`), `--version`, `--help`.

Owns argument parsing, logging setup (Kafka's log4j pattern on stderr) and exit codes: 0 after a clean
shutdown, 1 for a configuration or startup error (a one-line message, no traceback). Subcommands are
registered in `SUBCOMMANDS`, so later ones (`kbroker spark submit`) add an entry, not a branch.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import kbroker
from kbroker.spark.submit import add_cli as _add_spark_cli  # imports no pyspark: spark is optional
from kbroker.storage_tool import add_cli as _add_storage_cli

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
# Log levels as Kafka (log4j) spells them, plus Python's; WARN and WARNING are the same level, TRACE is
# DEBUG (Python has no finer level), FATAL is CRITICAL.
LOG_LEVELS = {"TRACE": "DEBUG", "DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARNING", "WARNING": "WARNING",
              "ERROR": "ERROR", "FATAL": "CRITICAL", "CRITICAL": "CRITICAL", "OFF": "CRITICAL"}


class KafkaLevelFormatter(logging.Formatter):
    """Kafka's pattern with log4j's level names (WARN, FATAL), so log tooling that reads Kafka reads us."""

    def format(self, record: logging.LogRecord) -> str:
        record.levelname = _LOG4J_LEVEL.get(record.levelno, record.levelname)
        return super().format(record)


_LOG4J_LEVEL = {logging.WARNING: "WARN", logging.CRITICAL: "FATAL"}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, with the field names of log4j2's JsonTemplateLayout ECS template
    (`@timestamp`, `log.level`, `message`, `log.logger`, `process.thread.name`, `error.*`): the
    layout a Kafka broker is given for structured logs, so the same shipper config reads both."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        doc: dict[str, object] = {
            "@timestamp": f"{ts}.{int(record.msecs):03d}Z",
            "log.level": _LOG4J_LEVEL.get(record.levelno, record.levelname),
            "message": record.getMessage(),
            "process.thread.name": record.threadName,
            "log.logger": record.name,
        }
        if record.exc_info and record.exc_info[0] is not None:
            doc["error.type"] = record.exc_info[0].__name__
            doc["error.message"] = str(record.exc_info[1])
            doc["error.stack_trace"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(doc, ensure_ascii=False)


def parse_log_level(name: str) -> str:
    """`WARN` -> `WARNING` (Python's name); raises ValueError for an unknown level."""
    level = LOG_LEVELS.get(name.strip().upper())
    if level is None:
        raise ValueError(f"unknown log level {name!r} (one of {', '.join(LOG_LEVELS)})")
    return level


def setup_logging(level: str = "INFO", *, json_lines: bool = False) -> None:
    """Kafka's pattern `[%d] %p %m (%c)%n`: `[2026-11-25 22:00:00,123] INFO message (logger.name)`,
    or JSON lines (`--log-format json`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if json_lines else KafkaLevelFormatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(parse_log_level(level))


def _parse_overrides(items: Sequence[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    return overrides


def _cmd_serve(args: argparse.Namespace) -> int:
    from kbroker.broker import run_broker
    from kbroker.config import ConfigError, KafkaConfig
    from kbroker.local_cluster import parse_node_count, run_local_cluster

    setup_logging(args.log_level, json_lines=args.log_format == "json")
    try:
        overrides = _parse_overrides(args.override or [])
        config = KafkaConfig.load(Path(args.config) if args.config else None, overrides)
        nodes = parse_node_count(args.nodes)
    except (ConfigError, ValueError) as e:
        print(f"kbroker: error: {e}", file=sys.stderr)
        return 1
    if nodes > 1:
        # One command, a local cluster of `nodes` kbroker processes (kbroker/local_cluster.py).
        return run_local_cluster(config, nodes, serve_args=["--log-level", args.log_level, "--log-format",
                                                            args.log_format],
                                 pin=args.pin, controller_port=args.controller_port,
                                 log_to_stdout=args.node_logs == "stdout", start_timeout_s=args.start_timeout)
    return run_broker(config, config_file=args.config)


def _log_level_arg(value: str) -> str:
    try:
        parse_log_level(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value.upper()


def _add_serve(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="run a broker (like kafka-server-start.sh)",
        description=(
            "Run a Kafka-compatible broker (with --nodes N, a local cluster of N). CONFIG is a server.properties file (Kafka's keys); "
            "without one kbroker listens on 127.0.0.1:9092 and keeps its data in ./data."
        ),
    )
    p.add_argument("config", nargs="?", metavar="CONFIG_FILE", help="server.properties file")
    p.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        help="set a config key (repeatable), as Kafka's --override",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        type=_log_level_arg,
        metavar="LEVEL",
        help="TRACE, DEBUG, INFO, WARN, ERROR or FATAL (log4j's names; WARNING and CRITICAL work too)",
    )
    p.add_argument(
        "--log-format",
        default="kafka",
        choices=["kafka", "json"],
        help="kafka: Kafka's log4j layout (default); json: one JSON object per line (ECS field names)",
    )
    nodes = p.add_argument_group(
        "a local cluster (one node per core)",
        "--nodes N starts N kbroker processes as one KRaft cluster: node i listens on the port + i - 1 "
        "(node 1 keeps the configured port), nodes 1 (N < 3) or 1-3 are combined broker,controller voters, "
        "data in <log.dirs>/node-<i> (docs/cluster.md, 'One node per core').")
    nodes.add_argument("--nodes", default="1", metavar="N",
                       help="number of nodes, or 'auto' for one per CPU (default 1: a single node, as before)")
    nodes.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                       help="pin node i to the i-th CPU of this process's affinity mask (default: on)")
    nodes.add_argument("--controller-port", type=int, default=None, metavar="PORT",
                       help="the first voter's CONTROLLER port; voter i uses PORT + i - 1 "
                            "(default: the first listener's port + 10000)")
    nodes.add_argument("--node-logs", default="file", choices=["file", "stdout"],
                       help="file: each node's log in <log dir>/node-<i>/server.log (default); "
                            "stdout: on stdout, each line prefixed [node-<i>]")
    nodes.add_argument("--start-timeout", type=float, default=120.0, metavar="SECONDS",
                       help="how long every node may take to start before the command gives up (default 120)")
    p.set_defaults(func=_cmd_serve)


# Each entry adds one subcommand to the parser.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [  # type: ignore[type-arg]
    _add_serve, _add_spark_cli, _add_storage_cli]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbroker", description="kbroker: a Kafka-compatible broker in Python."
    )
    parser.add_argument("--version", action="version", version=f"kbroker {kbroker.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return int(func(args))


if __name__ == "__main__":
    raise SystemExit(main())
