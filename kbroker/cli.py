"""The `kbroker` command line: `kbroker serve [CONFIG] [--override K=V]...`, `kbroker storage
format|info|random-uuid` (kafka-storage.sh, `storage_tool.py`), `--version`, `--help`.

Owns argument parsing, logging setup (Kafka's log4j pattern on stderr) and exit codes: 0 after a clean
shutdown, 1 for a configuration or startup error (a one-line message, no traceback). Subcommands are
registered in `SUBCOMMANDS`, so later ones (`kbroker spark submit`) add an entry, not a branch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import kbroker
from kbroker.spark.submit import add_cli as _add_spark_cli  # imports no pyspark: spark is optional
from kbroker.storage_tool import add_cli as _add_storage_cli

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def setup_logging(level: str = "INFO") -> None:
    """Kafka's pattern `[%d] %p %m (%c)%n`: `[2026-11-25 22:00:00,123] INFO message (logger.name)`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


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

    setup_logging(args.log_level)
    try:
        overrides = _parse_overrides(args.override or [])
        config = KafkaConfig.load(Path(args.config) if args.config else None, overrides)
    except (ConfigError, ValueError) as e:
        print(f"kbroker: error: {e}", file=sys.stderr)
        return 1
    return run_broker(config, config_file=args.config)


def _add_serve(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="run a broker (like kafka-server-start.sh)",
        description=(
            "Run a single-node Kafka-compatible broker. CONFIG is a server.properties file (Kafka's keys); "
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
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level"
    )
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
