"""`kbroker storage format | info | random-uuid`: Kafka's `kafka-storage.sh` (``StorageTool`` and
``org.apache.kafka.metadata.storage.Formatter``), writing what Kafka 4.3.1 writes.

``format --config server.properties --cluster-id ID`` formats every directory of ``log.dirs`` and
``metadata.log.dir`` that has no ``meta.properties`` yet (in the order Kafka writes them: a Java
``HashMap``'s, by path hash):

- ``meta.properties``: ``version=1``, ``node.id``, ``cluster.id``, ``directory.id`` (a new random id;
  the voter's own id for the metadata directory of an ``--initial-controllers`` voter), written as
  Java's ``Properties.store`` writes it (``kbroker.log.checkpoints.write_properties``);
- ``bootstrap.checkpoint``: ``metadata.version`` (``--release-version``, default 4.3-IV0 = 30) and the
  other finalized features (``kbroker.snapshot.bootstrap``);
- with ``--standalone`` / ``--initial-controllers`` (KIP-853 dynamic quorum, ``kraft.version`` 1), in
  the metadata log directory: ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``, a
  snapshot whose header batch holds ``KRaftVersionRecord`` and ``VotersRecord`` (the initial voters,
  each with the controller listener's endpoint).

Features: the format validates ``--feature`` against what *this software* supports, as Kafka's
Formatter does against Kafka's. kbroker implements ``metadata.version`` (3.3-IV3 .. 4.3-IV0),
``group.version`` (0-1), ``kraft.version`` (0-1), ``transaction.version`` (0-2, KIP-890 part 2) and
``eligible.leader.replicas.version`` (0-1, KIP-966: level 1 by default from 4.1-IV0, as Kafka; it needs
metadata.version 4.0-IV1 or later); Kafka's other production features (``share.version``,
``streams.version``) are accepted only at level 0, so the default ``bootstrap.checkpoint`` finalizes
metadata.version, group.version, transaction.version and eligible.leader.replicas.version:
byte-for-byte what ``kafka-storage format --feature share.version=0 --feature streams.version=0`` writes.
A node formatted by Kafka's own tool starts too (its unsupported levels are dropped at bootstrap).

kbroker's implicit single-node quorum: a config with neither ``controller.quorum.voters`` nor
``controller.quorum.bootstrap.servers`` (kbroker's defaults) formats as a static quorum; Kafka's
config would be invalid there. Everything else follows Kafka's rules and messages. ``--add-scram``
is refused (SCRAM is not implemented).

Exit codes as Kafka's: 0, or 1 with the message on stderr.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kbroker.config import ConfigError, KafkaConfig, parse_endpoints
from kbroker.log.checkpoints import (
    java_properties_order,
    random_kafka_uuid,
    read_properties,
    uuid_from_base64,
    uuid_to_base64,
    write_properties,
)
from kbroker.protocol.messages.voters_record import VotersRecord
from kbroker.protocol.metadata_records import FeatureLevelRecord
from kbroker.snapshot import BOOTSTRAP_SNAPSHOT_ID, build_snapshot, write_snapshot_file
from kbroker.snapshot.bootstrap import BootstrapMetadata, write_bootstrap_file

META_PROPERTIES = "meta.properties"
CLUSTER_METADATA_DIR = "__cluster_metadata-0"

# MetadataVersion of Kafka 4.3.1 from 3.3-IV3 (the oldest KRaft level Kafka 4 accepts) to
# LATEST_PRODUCTION 4.3-IV0: (level, version). 4.4-IV0 (31) is not production in 4.3.1 and kbroker
# does not implement it.
METADATA_VERSIONS: tuple[tuple[int, str], ...] = (
    (7, "3.3-IV3"), (8, "3.4-IV0"), (9, "3.5-IV0"), (10, "3.5-IV1"), (11, "3.5-IV2"), (12, "3.6-IV0"),
    (13, "3.6-IV1"), (14, "3.6-IV2"), (15, "3.7-IV0"), (16, "3.7-IV1"), (17, "3.7-IV2"), (18, "3.7-IV3"),
    (19, "3.7-IV4"), (20, "3.8-IV0"), (21, "3.9-IV0"), (22, "4.0-IV0"), (23, "4.0-IV1"), (24, "4.0-IV2"),
    (25, "4.0-IV3"), (26, "4.1-IV0"), (27, "4.1-IV1"), (28, "4.2-IV0"), (29, "4.2-IV1"), (30, "4.3-IV0"),
)
LATEST_PRODUCTION = 30
METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
GROUP_VERSION = "group.version"
# Kafka 4.3's production features: (name, highest level kbroker implements). A feature kbroker does
# not implement is accepted at level 0 only.
SUPPORTED_FEATURES: dict[str, int] = {
    "eligible.leader.replicas.version": 1,
    GROUP_VERSION: 1,
    KRAFT_VERSION: 1,
    "share.version": 0,
    "streams.version": 0,
    "transaction.version": 2,
}
TRANSACTION_VERSION = "transaction.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"


class FormatterError(Exception):
    """Kafka's FormatterException / TerseException: printed alone, exit 1."""


def metadata_version_name(level: int) -> str:
    for lv, name in METADATA_VERSIONS:
        if lv == level:
            return name
    raise FormatterError(f"Unknown metadata.version {level}")


def parse_release_version(value: str) -> int:
    """``MetadataVersion.fromVersionString``: "3.9-IV0", or "3.9" for the newest level of 3.9."""
    matches = [lv for lv, name in METADATA_VERSIONS if name == value or name.split("-")[0] == value]
    if not matches:
        raise FormatterError(f"Unknown metadata.version '{value}'. Supported metadata.version are "
                             f"{', '.join(name for _, name in METADATA_VERSIONS)}")
    return max(matches)


def default_feature_level(name: str, metadata_version: int) -> int:
    """Kafka's ``Feature.defaultLevel(metadataVersion)``, bounded by what kbroker implements."""
    if name == GROUP_VERSION:
        return 1 if metadata_version >= 22 else 0  # GroupVersion.GV_1 from 4.0-IV0
    if name == TRANSACTION_VERSION:
        return 2 if metadata_version >= 24 else 0  # TransactionVersion.TV_2 from 4.0-IV2 (KIP-890 part 2)
    if name == ELIGIBLE_LEADER_REPLICAS_VERSION:
        return 1 if metadata_version >= 26 else 0  # EligibleLeaderReplicasVersion.ELRV_1 from 4.1-IV0 (KIP-966)
    return 0


@dataclass(frozen=True, slots=True)
class DynamicVoter:
    """One entry of ``--initial-controllers``: ``id@host:port:directoryid`` (Kafka's DynamicVoter)."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    @classmethod
    def parse(cls, text: str) -> DynamicVoter:
        text = text.strip()
        at = text.find("@")
        if at < 0:
            raise FormatterError(f"No @ found in dynamic voter string {text}")
        if at == 0:
            raise FormatterError(f"Invalid @ at beginning of dynamic voter string {text}")
        try:
            node_id = int(text[:at])
        except ValueError:
            raise FormatterError(f"Failed to parse node id in dynamic voter string {text}") from None
        if node_id < 0:
            raise FormatterError(f"Invalid negative node id {node_id} in dynamic voter string {text}")
        rest = text[at + 1:]
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                raise FormatterError(f"Hostname began with left bracket, but no right bracket was found in "
                                     f"dynamic voter string {text}")
            host, rest = rest[1:end], rest[end + 1:]
            if not rest.startswith(":"):
                raise FormatterError(f"Port section must start with a colon in dynamic voter string {text}")
            rest = rest[1:]
        else:
            colon = rest.find(":")
            if colon < 0:
                raise FormatterError(f"No colon following hostname could be found in dynamic voter string {text}")
            host, rest = rest[:colon], rest[colon + 1:]
        colon = rest.find(":")
        if colon < 0:
            raise FormatterError(f"No colon following port could be found in dynamic voter string {text}")
        try:
            port = int(rest[:colon])
        except ValueError:
            raise FormatterError(f"Failed to parse port in dynamic voter string {text}") from None
        if not 0 <= port <= 65535:
            raise FormatterError(f"Invalid port {port} in dynamic voter string {text}")
        try:
            directory_id = uuid_from_base64(rest[colon + 1:])
        except ValueError as e:
            raise FormatterError(f"Failed to parse directory ID in dynamic voter string {text}: {e}") from None
        return cls(node_id, host, port, directory_id)


def parse_initial_controllers(text: str) -> dict[int, DynamicVoter]:
    voters: dict[int, DynamicVoter] = {}
    dir_ids: set[uuid.UUID] = set()
    for part in text.split(","):
        voter = DynamicVoter.parse(part)
        if voter.node_id in voters:
            raise FormatterError(f"Node id {voter.node_id} was specified more than once.")
        if voter.directory_id in dir_ids:
            raise FormatterError(f"Directory id {uuid_to_base64(voter.directory_id)} was specified more than once.")
        voters[voter.node_id] = voter
        dir_ids.add(voter.directory_id)
    if not voters:
        raise FormatterError("No voters given.")
    return voters


def voters_record(voters: dict[int, DynamicVoter], listener_name: str) -> VotersRecord:
    """``DynamicVoters.toVoterSet(listener).toVotersRecord()``: one endpoint per voter, kraft.version 0-1."""
    return VotersRecord(version=0, voters=[
        VotersRecord.Voter(
            voter_id=v.node_id, voter_directory_id=v.directory_id,
            endpoints=[VotersRecord.Endpoint(name=listener_name, host=v.host, port=v.port)],
            kraft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))
        for _, v in sorted(voters.items())])


@dataclass
class FormatRequest:
    cluster_id: str
    release_version: str | None = None
    features: Sequence[str] = ()
    ignore_formatted: bool = False
    standalone: bool = False
    initial_controllers: str | None = None
    no_initial_controllers: bool = False
    add_scram: Sequence[str] = ()


def _config_list(config: KafkaConfig, key: str) -> list[str]:
    value = config[key]
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v).strip() for v in value if str(v).strip()]


def _controller_listener_name(config: KafkaConfig) -> str | None:
    names = _config_list(config, "controller.listener.names")
    return names[0] if names else None


def _standalone_voter(config: KafkaConfig, listener_name: str | None) -> DynamicVoter:
    """``--standalone``: this node, its controller listener's (advertised) endpoint, a new directory id."""
    if listener_name is None:
        raise FormatterError("You must specify the name of the initial controller listener.")
    for key in ("advertised.listeners", "listeners"):
        raw = config[key]
        if not raw:
            continue
        for e in parse_endpoints(key, raw, config.security_protocol_map):
            if e.name == listener_name.upper():
                host = e.host or socket.getfqdn()
                return DynamicVoter(config.node_id, host, e.port, random_kafka_uuid())
    raise FormatterError(f"Cannot find the controller listener {listener_name} in listeners: "
                         "--standalone needs it for the voter's endpoint.")


def _feature_levels(req: FormatRequest, dynamic_quorum: bool) -> tuple[int, dict[str, int]]:
    """Kafka's ``calculateEffectiveReleaseVersion`` and ``calculateEffectiveFeatureLevels``."""
    requested: dict[str, int] = {}
    for item in req.features:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FormatterError(f"Can't parse feature={item}. The format must be feature=level.")
        try:
            requested[key] = int(text.strip())
        except ValueError:
            raise FormatterError(f"Can't parse feature={item}. The level must be a number.") from None
    if METADATA_VERSION in requested:
        if req.release_version is not None:
            raise FormatterError(f"Use --release-version instead of --feature {METADATA_VERSION}=X to avoid ambiguity.")
        mv = requested[METADATA_VERSION]
        if mv < METADATA_VERSIONS[0][0]:
            raise FormatterError(f"{METADATA_VERSION} {mv} is too old to be supported.")
        if mv > LATEST_PRODUCTION:
            raise FormatterError(f"{METADATA_VERSION} {mv} is not yet stable.")
    elif req.release_version is not None:
        mv = parse_release_version(req.release_version)
    else:
        mv = LATEST_PRODUCTION
    for name in requested:
        if name != METADATA_VERSION and name not in SUPPORTED_FEATURES:
            raise FormatterError(f"Unsupported feature: {name}. Supported features are: "
                                 f"{', '.join(sorted(SUPPORTED_FEATURES))}")
    levels = {k: v for k, v in requested.items() if k != METADATA_VERSION}
    for name in SUPPORTED_FEATURES:
        if name == KRAFT_VERSION:
            configured = levels.get(KRAFT_VERSION)
            if configured is not None:
                if configured == 0 and dynamic_quorum:
                    raise FormatterError(f"Cannot set kraft.version to {configured} if KIP-853 configuration is "
                                         "present. Try removing the --feature flag for kraft.version.")
                if configured != 0 and not dynamic_quorum:
                    raise FormatterError(f"Cannot set kraft.version to {configured} unless KIP-853 configuration "
                                         "is present. Try removing the --feature flag for kraft.version.")
            else:
                levels[KRAFT_VERSION] = 1 if dynamic_quorum else 0
        elif name not in levels:
            levels[name] = default_feature_level(name, mv)
    for name, level in levels.items():
        top = SUPPORTED_FEATURES[name]
        if not 0 <= level <= top:
            raise FormatterError(f"No feature:{name} with feature level {level}"
                                 + ("" if top else " (kbroker implements only level 0 of it)"))
        if name == GROUP_VERSION and level >= 1 and mv < 22:
            raise FormatterError(f"Invalid feature level {level} for {name}: it requires metadata.version "
                                 "4.0-IV0 or later.")
        if name == ELIGIBLE_LEADER_REPLICAS_VERSION and level >= 1 and mv < 23:
            # Kafka's Feature.validateVersion: ELRV_1 depends on metadata.version 4.0-IV1 (level 23).
            raise FormatterError(f"{name} could not be set to {level} because it depends on metadata.version level 23")
    return mv, levels


def _describe_bootstrap(bootstrap: BootstrapMetadata) -> str:
    """Java's ``BootstrapMetadata.toString`` (what kafka-storage format prints first)."""
    parts = []
    for r in bootstrap.records:
        if isinstance(r, FeatureLevelRecord):
            parts.append(f"ApiMessageAndVersion(FeatureLevelRecord(name='{r.name}', featureLevel={r.feature_level}) "
                         "at version 0)")
        else:
            parts.append(f"ApiMessageAndVersion({r!r})")
    return (f"BootstrapMetadata(records=[{', '.join(parts)}], metadataVersionLevel={bootstrap.metadata_version_level}, "
            f"source={bootstrap.source})")


def format_storage(config: KafkaConfig, req: FormatRequest, out: TextIO = sys.stdout,
                   now_ms: int | None = None) -> int:
    """``kafka-storage format``: raises ``FormatterError`` (exit 1) or returns 0."""
    if req.add_scram:
        raise FormatterError("--add-scram is not supported by kbroker (SCRAM credentials are not implemented).")
    try:
        uuid_from_base64(req.cluster_id)
        if len(req.cluster_id) != 22:
            raise ValueError("a cluster id is 22 base64 characters")
    except ValueError as e:
        raise FormatterError(f"Cluster ID string {req.cluster_id} does not appear to be a valid UUID: {e}") from None
    node_id = config.node_id
    if node_id < 0:
        raise FormatterError("You must specify a valid non-negative node ID.")
    roles = _config_list(config, "process.roles")
    voters_cfg = _config_list(config, "controller.quorum.voters")
    bootstrap_servers = _config_list(config, "controller.quorum.bootstrap.servers")
    listener_name = _controller_listener_name(config)
    flags = sum([req.standalone, req.initial_controllers is not None, req.no_initial_controllers])
    if flags > 1:
        raise FormatterError("Only one of --standalone, --initial-controllers and --no-initial-controllers "
                             "may be given.")
    if req.standalone and "controller" not in roles:
        raise FormatterError("You can only use --standalone on a controller.")
    if voters_cfg and (req.standalone or req.initial_controllers is not None):
        raise FormatterError("You cannot specify controller.quorum.voters and format the node with "
                             "--initial-controllers or --standalone. If you want to use dynamic quorum, please "
                             "remove controller.quorum.voters and specify controller.quorum.bootstrap.servers "
                             "instead.")
    if "controller" in roles and not voters_cfg and bootstrap_servers and flags == 0:
        raise FormatterError("Because controller.quorum.voters is not set on this controller, you must specify "
                             "one of the following: --standalone, --initial-controllers, or "
                             "--no-initial-controllers.")
    initial: dict[int, DynamicVoter] | None = None
    if req.standalone:
        initial = {node_id: _standalone_voter(config, listener_name)}
    elif req.initial_controllers is not None:
        initial = parse_initial_controllers(req.initial_controllers)
    if initial is not None and listener_name is None:
        raise FormatterError("You must specify the name of the initial controller listener.")
    mv, levels = _feature_levels(req, dynamic_quorum=initial is not None)
    bootstrap = BootstrapMetadata.from_versions(mv, levels, "format command")

    metadata_dir = str(config.metadata_log_dir)
    directories = sorted({str(d) for d in config.log_dirs} | {metadata_dir})
    formatted: dict[str, dict[str, str]] = {}
    empty: list[str] = []
    for d in directories:
        try:
            props = read_properties(Path(d) / META_PROPERTIES)
        except OSError as e:
            print(f"I/O error trying to read log directory {d}. Ignoring... ({e})", file=out)
            continue
        if props is None:
            empty.append(d)
        else:
            formatted[d] = props
    for d, props in formatted.items():
        if props.get("cluster.id") not in (None, req.cluster_id):
            raise FormatterError(f"Invalid cluster.id in: {Path(d) / META_PROPERTIES}. Expected {req.cluster_id}, "
                                 f"but read {props.get('cluster.id')}")
        stored = props.get("node.id")
        if stored is not None and stored != str(node_id):
            raise FormatterError(f"Stored node id {stored} doesn't match previous node id {node_id} in "
                                 f"{Path(d) / META_PROPERTIES}. If you moved your data, make sure your configured "
                                 "node id matches. If you intend to create a new node, you should remove all data "
                                 "in your data directories.")
    if formatted and not req.ignore_formatted:
        first = java_properties_order(list(formatted))[0]  # the first key of Kafka's HashMap
        raise FormatterError(f"Log directory {first} is already formatted. Use --ignore-formatted "
                             "to ignore this directory and format the others.")
    if not empty:
        print("All of the log directories are already formatted.", file=out)
        return 0
    print(f"Bootstrap metadata: {_describe_bootstrap(bootstrap)}", file=out)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    used_dir_ids = {uuid_from_base64(p["directory.id"]) for p in formatted.values() if "directory.id" in p}
    # Kafka writes the new directories in the iteration order of a java.util.HashMap keyed by path
    # (MetaPropertiesEnsemble.Copier.writeLogDirChanges), not sorted: the same hash-bucket order as
    # Properties.store, so its "Formatting ..." lines come out in the same order here.
    for d in java_properties_order(empty):
        if d != metadata_dir:
            kind = "data directory"
        elif initial is None:
            kind = "metadata directory"
        elif node_id in initial:
            kind = "dynamic metadata voter directory"
        else:
            kind = "dynamic metadata non-voter directory"
        if kind == "dynamic metadata voter directory":
            assert initial is not None
            dir_id = initial[node_id].directory_id
        else:
            dir_id = random_kafka_uuid()
            while dir_id in used_dir_ids:
                dir_id = random_kafka_uuid()
        used_dir_ids.add(dir_id)
        print(f"Formatting {kind} {d} with {METADATA_VERSION} {metadata_version_name(mv)}.", file=out)
        path = Path(d)
        try:
            path.mkdir(parents=True, exist_ok=True)
            write_bootstrap_file(path, bootstrap, now)
            if initial is not None and d == metadata_dir:
                assert listener_name is not None
                snapshot = build_snapshot([], BOOTSTRAP_SNAPSHOT_ID, last_contained_log_timestamp=now, now_ms=now,
                                          kraft_version=levels[KRAFT_VERSION],
                                          voters=voters_record(initial, listener_name))
                write_snapshot_file(path / CLUSTER_METADATA_DIR, BOOTSTRAP_SNAPSHOT_ID, snapshot)
            write_properties(path / META_PROPERTIES, {"version": "1", "cluster.id": req.cluster_id,
                                                      "node.id": str(node_id), "directory.id": uuid_to_base64(dir_id)})
        except OSError as e:
            raise FormatterError(f"Error while writing meta.properties file {d}: {e}") from e
    return 0


def storage_info(config: KafkaConfig, out: TextIO = sys.stdout) -> int:
    """``kafka-storage info``: the log directories and their meta.properties; 1 if there are problems."""
    directories = sorted({str(d) for d in config.log_dirs} | {str(config.metadata_log_dir)})
    problems: list[str] = []
    found: list[str] = []
    props_seen: dict[str, str] | None = None
    for d in directories:
        if not os.path.isdir(d):
            problems.append(f"{d} does not exist")
            continue
        found.append(d)
        props = read_properties(Path(d) / META_PROPERTIES)
        if props is None:
            problems.append(f"{d} is not formatted.")
        elif props_seen is None:
            props_seen = props
        elif props.get("cluster.id") != props_seen.get("cluster.id") or props.get("node.id") != props_seen.get("node.id"):
            problems.append(f"Found inconsistent properties in {Path(d) / META_PROPERTIES}")
    print(f"Found log director{'y' if len(found) == 1 else 'ies'}:", file=out)
    for d in found:
        print(f"  {d}", file=out)
    print("", file=out)
    if props_seen is not None:
        print("Found metadata: {" + ", ".join(f"{k}={v}" for k, v in sorted(props_seen.items())) + "}", file=out)
        print("", file=out)
    if problems:
        print(f"Found problem{'s' if len(problems) > 1 else ''}:", file=out)
        for p in problems:
            print(f"  {p}", file=out)
        print("", file=out)
        return 1
    return 0


# -- the command line --------------------------------------------------------------------------------

def _load_config(path: str) -> KafkaConfig:
    return KafkaConfig.load(Path(path))


def _cmd(args: argparse.Namespace) -> int:
    try:
        if args.storage_command == "random-uuid":
            print(uuid_to_base64(random_kafka_uuid()))
            return 0
        config = _load_config(args.config)
        if args.storage_command == "info":
            return storage_info(config)
        req = FormatRequest(cluster_id=args.cluster_id, release_version=args.release_version,
                            features=args.feature or [], ignore_formatted=args.ignore_formatted,
                            standalone=args.standalone, initial_controllers=args.initial_controllers,
                            no_initial_controllers=args.no_initial_controllers, add_scram=args.add_scram or [])
        return format_storage(config, req)
    except (FormatterError, ConfigError, ValueError, OSError) as e:
        print(str(e), file=sys.stderr)
        return 1


def add_cli(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("storage", help="format or inspect the log directories (like kafka-storage.sh)",
                       description="The storage tool: kafka-storage.sh's format, info and random-uuid.")
    ssub = p.add_subparsers(dest="storage_command", metavar="{info,format,random-uuid}", required=True)
    info = ssub.add_parser("info", help="Get information about the Kafka log directories on this node.")
    info.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt = ssub.add_parser("format", help="Format the Kafka log directories on this node.")
    fmt.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    fmt.add_argument("--add-scram", "-S", action="append", help="(not supported by kbroker)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="Skip already formatted directories rather than failing.")
    fmt.add_argument("--release-version", "-r",
                     help="The release version to use for the initial feature settings. The minimum is 3.3-IV3; "
                          "the default is 4.3-IV0")
    fmt.add_argument("--feature", "-f", action="append",
                     help="The setting to use for a specific feature, in feature=level format.")
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true",
                        help="Initialize a controller as a single-node dynamic quorum.")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="Initialize a server without specifying a dynamic quorum.")
    quorum.add_argument("--initial-controllers", "-I",
                        help="The dynamic quorum: a comma-separated list of id@hostname:port:directory.")
    ssub.add_parser("random-uuid", help="Print a random UUID.")
    p.set_defaults(func=_cmd)
