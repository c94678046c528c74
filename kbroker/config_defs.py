"""The broker config table: every Kafka server.properties key kbroker reads, with its type, default and validator.

Owns `CONFIG_DEFS` (also what DescribeConfigs lists for the BROKER resource), `ConfigDef`, the
validators (`at_least`, `between`, `one_of`), `ConfigError` and the config-source names. Pure data:
imports nothing from kbroker. `kbroker.config` builds `KafkaConfig` on this table and re-exports it.

Defaults are Kafka 4.3's, except where docs/configuration.md says otherwise (kbroker's out-of-the-box
single node: node.id=1, listeners on 127.0.0.1:9092, data in ./data).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

DEFAULT_CONFIG = "DEFAULT_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"


class ConfigError(ValueError):
    """An invalid configuration value; the message is Kafka's wording, fit to show a user as is."""


Validator = Callable[[str, Any], None]


def at_least(minimum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and value < minimum:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {minimum}"
            )

    return check


def between(low: float, high: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and not low <= value <= high:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be no less than {low} "
                f"and no more than {high}"
            )

    return check


def one_of(*allowed: str, case_insensitive: bool = False) -> Validator:
    folded = {a.lower() if case_insensitive else a for a in allowed}

    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v is None:
                continue
            if (v.lower() if case_insensitive else v) not in folded:
                raise ConfigError(
                    f"Invalid value {v} for configuration {name}: String must be one of: {', '.join(allowed)}"
                )

    return check


@dataclass(frozen=True)
class ConfigDef:
    """One broker key: Kafka's type name (int, long, double, boolean, string, list, password, class)."""

    name: str
    type: str
    default: Any
    doc: str = ""
    dynamic_update: bool = False
    sensitive: bool = False
    validator: Validator | None = None
    # Kafka's declared `ConfigDef.Type` where kbroker parses the value as another type (DescribeConfigs
    # v3+ reports Kafka's): e.g. Kafka declares listener.security.protocol.map a STRING it splits itself.
    kafka_type: str | None = None

    @property
    def described_type(self) -> str:
        return self.kafka_type or self.type


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# fmt: off
CONFIG_DEFS: dict[str, ConfigDef] = _defs(
    # --- node and listeners (KRaft combined mode, single node) ---
    ConfigDef("node.id", "int", 1, "The node id. Kafka requires it; kbroker defaults to 1.",
              validator=at_least(0)),
    ConfigDef("broker.rack", "string", None,
              "Rack of this broker: registered with the controller and reported in Metadata and DescribeCluster."),
    ConfigDef("broker.id", "int", -1, "Legacy alias of node.id; must equal node.id when both are set."),
    ConfigDef("process.roles", "list", ["broker", "controller"],
              "broker: join a KRaft cluster (docs/cluster.md); controller: a Raft voter running the quorum "
              "controller (docs/controller.md); both (the default): a combined node, by default of a one-voter quorum "
              "with an implicit loopback controller listener (docs/cluster.md).",
              validator=one_of("broker", "controller")),
    ConfigDef("controller.quorum.voters", "list", [],
              "The static voter set (id@host:port,...) of a KRaft cluster; without a controller listener a "
              "broker,controller node is its own only voter."),
    ConfigDef("controller.quorum.bootstrap.servers", "list", [],
              "Controllers a broker asks for the quorum (host:port,...); without a controller listener a "
              "broker,controller node is its own only voter."),
    ConfigDef("controller.listener.names", "string", None,
              "Accepted; kbroker has no separate controller listener.", kafka_type="list"),
    ConfigDef("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], "Where the broker listens."),
    # Kafka 4.3 reports advertised.listeners read-only (a KRaft broker registers its endpoints once).
    ConfigDef("advertised.listeners", "list", None, "What Metadata tells clients (default: listeners)."),
    ConfigDef("listener.security.protocol.map", "list",
              ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
              "Listener name to security protocol.", dynamic_update=True, kafka_type="string"),
    ConfigDef("inter.broker.listener.name", "string", None,
              "The listener brokers use between themselves (must be one of listeners)."),
    ConfigDef("security.inter.broker.protocol", "string", "PLAINTEXT",
              "Security protocol between brokers when inter.broker.listener.name is not set.",
              validator=one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    # --- TLS (SSL and SASL_SSL listeners; each key may be set per listener as listener.name.<l>.<key>) ---
    ConfigDef("ssl.keystore.type", "string", "JKS", "Keystore format: JKS, PKCS12 or PEM.",
              dynamic_update=True),
    ConfigDef("ssl.keystore.location", "string", None, "The keystore file (of ssl.keystore.type).",
              dynamic_update=True),
    ConfigDef("ssl.keystore.password", "string", None, "Password of a JKS or PKCS12 keystore.", dynamic_update=True,
              sensitive=True, kafka_type="password"),
    ConfigDef("ssl.key.password", "string", None, "Password of the private key (default: the keystore password).",
              dynamic_update=True, sensitive=True, kafka_type="password"),
    ConfigDef("ssl.keystore.key", "string", None, "The private key, PEM text (with ssl.keystore.certificate.chain).",
              dynamic_update=True, sensitive=True, kafka_type="password"),
    ConfigDef("ssl.keystore.certificate.chain", "string", None, "The certificate chain, PEM text.",
              dynamic_update=True, sensitive=True, kafka_type="password"),
    ConfigDef("ssl.truststore.type", "string", "JKS", "Truststore format: JKS, PKCS12 or PEM.",
              dynamic_update=True),
    ConfigDef("ssl.truststore.location", "string", None, "The truststore file (of ssl.truststore.type).",
              dynamic_update=True),
    ConfigDef("ssl.truststore.password", "string", None, "Password of a JKS or PKCS12 truststore (optional).", dynamic_update=True,
              sensitive=True, kafka_type="password"),
    ConfigDef("ssl.truststore.certificates", "string", None, "Trusted CA certificates, PEM text.",
              dynamic_update=True, sensitive=True, kafka_type="password"),
    ConfigDef("ssl.client.auth", "string", "none", "Client certificates: required, requested or none.",
              dynamic_update=True, validator=one_of("required", "requested", "none")),
    ConfigDef("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.",
              dynamic_update=True),
    ConfigDef("ssl.protocol", "string", "TLSv1.3", "Accepted (the enabled protocols bound the versions).",
              dynamic_update=True),
    ConfigDef("ssl.cipher.suites", "list", [], "TLS 1.2 cipher suites (OpenSSL names); empty: the defaults.",
              dynamic_update=True),
    ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT",
              "Rules mapping a client certificate's distinguished name to a principal name (KIP-371)."),
    ConfigDef("ssl.endpoint.identification.algorithm", "string", "https",
              "Accepted; a broker does not verify client host names.", dynamic_update=True),
    # --- authorization (docs/security.md) ---
    ConfigDef("authorizer.class.name", "string", "",
              "Empty: no authorization; org.apache.kafka.metadata.authorizer.StandardAuthorizer: ACLs.",
              validator=one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")),
    ConfigDef("super.users", "string", None,
              "Principals allowed everything, separated by semicolons (User:admin;User:broker)."),
    ConfigDef("allow.everyone.if.no.acl.found", "boolean", False,
              "Allow a request on a resource no ACL applies to."),
    # --- SASL (SASL_PLAINTEXT and SASL_SSL listeners) ---
    ConfigDef("sasl.enabled.mechanisms", "list", ["GSSAPI"],
              "Mechanisms served on SASL listeners (kbroker: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).",
              dynamic_update=True),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
              "Mechanism brokers use between themselves.", dynamic_update=True),
    ConfigDef("sasl.mechanism.controller.protocol", "string", "GSSAPI",
              "Mechanism used to talk to the controllers (on a SASL controller listener)."),
    ConfigDef("sasl.jaas.config", "string", None,
              "JAAS login module entry; per listener and mechanism: listener.name.<l>.<mechanism>.sasl.jaas.config.",
              dynamic_update=True, sensitive=True, kafka_type="password"),
    ConfigDef("connection.failed.authentication.delay.ms", "int", 100,
              "Delay of the response to a failed authentication before the connection closes.",
              validator=at_least(0)),
    ConfigDef("connections.max.reauth.ms", "long", 0,
              "KIP-368: the lifetime of a SASL session; a client must re-authenticate before it ends or its "
              "connection is closed (0: sessions never expire)."),
    # --- delegation tokens (KIP-48) ---
    ConfigDef("delegation.token.secret.key", "string", None,
              "The secret every node derives token HMACs from (the same on every broker and controller); "
              "unset: delegation tokens are disabled (DELEGATION_TOKEN_AUTH_DISABLED).",
              sensitive=True, kafka_type="password"),
    ConfigDef("delegation.token.max.lifetime.ms", "long", 604800000,
              "The maximum lifetime of a token; it cannot be renewed past it.", validator=at_least(1)),
    ConfigDef("delegation.token.expiry.time.ms", "long", 86400000,
              "The validity period of a new or renewed token, unless the request asks for less.",
              validator=at_least(1)),
    ConfigDef("delegation.token.expiry.check.interval.ms", "long", 3600000,
              "How often the active controller removes expired tokens.", validator=at_least(1)),
    # --- OAUTHBEARER with a JWKS (KIP-768); per listener as listener.name.<l>.<key> ---
    ConfigDef("sasl.oauthbearer.jwks.endpoint.url", "string", None,
              "Where the OAuth provider's JWKS is read (https, http or file URL)."),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000,
              "How often the JWKS is read again (sooner for an unknown key id)."),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100,
              "First wait between attempts to read the JWKS."),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10000,
              "Longest wait between attempts to read the JWKS."),
    ConfigDef("sasl.oauthbearer.expected.audience", "list", [],
              "Audiences a token's aud claim must contain one of (empty: not checked)."),
    ConfigDef("sasl.oauthbearer.expected.issuer", "string", None,
              "The iss claim a token must carry (null: not checked)."),
    ConfigDef("sasl.oauthbearer.clock.skew.seconds", "int", 30,
              "Clock skew allowed on a token's exp, iat and nbf."),
    ConfigDef("sasl.oauthbearer.scope.claim.name", "string", "scope", "The claim holding a token's scope."),
    ConfigDef("sasl.oauthbearer.sub.claim.name", "string", "sub", "The claim naming a token's principal."),
    ConfigDef("metadata.log.dir", "string", None, "Where __cluster_metadata-0 lives; default: the first of log.dirs."),
    # --- the metadata log and its snapshots (Kafka's MetadataLogConfig; docs/storage.md, "Snapshots") ---
    ConfigDef("metadata.log.segment.bytes", "int", 1073741824, "Segment size of __cluster_metadata-0.",
              validator=at_least(12)),
    ConfigDef("metadata.log.segment.min.bytes", "int", 8388608,
              "Internal (Kafka's too): the floor of metadata.log.segment.bytes; lowered only by tests.",
              validator=at_least(1)),
    ConfigDef("metadata.log.segment.ms", "long", 604800000, "Roll a metadata log segment this old.",
              validator=at_least(1)),
    ConfigDef("metadata.max.retention.bytes", "long", 104857600,
              "Metadata log + snapshots size above which the oldest snapshot and the log behind the next "
              "one are deleted (-1: no size limit)."),
    ConfigDef("metadata.max.retention.ms", "long", 604800000,
              "Age of a snapshot after which it and the log behind the next one are deleted (-1: no limit)."),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", "long", 20971520,
              "Metadata log bytes replayed after which a new snapshot is written.", validator=at_least(1)),
    ConfigDef("metadata.log.max.snapshot.interval.ms", "long", 3600000,
              "Time after which a new snapshot is written when the log has new records (0: never by time).",
              validator=at_least(0)),
    # --- sockets and request queue ---
    ConfigDef("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.",
              validator=at_least(1)),
    ConfigDef("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF (-1: OS default)."),
    ConfigDef("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF (-1: OS default)."),
    ConfigDef("socket.listen.backlog.size", "int", 50, "listen() backlog.", validator=at_least(1)),
    ConfigDef("queued.max.requests", "int", 500,
              "Complete requests not yet handed off by their handler, broker-wide.", validator=at_least(1)),
    ConfigDef("queued.max.request.bytes", "long", -1,
              "Bytes of requests being received or not yet handled (-1: no bound)."),
    ConfigDef("max.connections", "int", INT_MAX, "Connections accepted at once.", dynamic_update=True,
              validator=at_least(0)),
    ConfigDef("max.connection.creation.rate", "int", INT_MAX,
              "KIP-612: new connections per second on the broker (every listener but the inter-broker one); "
              "per listener: listener.name.<l>.max.connection.creation.rate (read at start-up). Dynamic: "
              "IncrementalAlterConfigs of the broker or the cluster default applies to the next connection.",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("max.connections.per.ip", "int", INT_MAX, "Connections accepted at once from one address.",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("connections.max.idle.ms", "long", 600000,
              "Connections with no complete request or response for this long are closed (<= 0: never)."),
    ConfigDef("num.network.threads", "int", 3, "Accepted; kbroker has one event loop.", dynamic_update=True,
              validator=at_least(1)),
    ConfigDef("num.io.threads", "int", 8, "Accepted; kbroker has one event loop.", dynamic_update=True,
              validator=at_least(1)),
    ConfigDef("background.threads", "int", 10, "Accepted; ignored.", dynamic_update=True,
              validator=at_least(1)),
    ConfigDef("num.recovery.threads.per.data.dir", "int", 2, "Threads per log directory that close the logs at shutdown (read at start); recovery at start-up is sequential.",
              dynamic_update=True, validator=at_least(1)),
    # --- client quotas (docs/security.md, "Quotas") ---
    ConfigDef("quota.window.num", "int", 11, "Samples kept for client quota rates.", validator=at_least(1)),
    ConfigDef("quota.window.size.seconds", "int", 1, "Time span of each client quota sample.",
              validator=at_least(1)),
    ConfigDef("replication.quota.window.num", "int", 11, "Samples kept for replication quota rates (KIP-73).",
              validator=at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", "int", 1, "Time span of each replication quota sample.",
              validator=at_least(1)),
    ConfigDef("controller.quota.window.num", "int", 11,
              "Samples kept for controller mutation quota rates (the token bucket's burst).", validator=at_least(1)),
    ConfigDef("controller.quota.window.size.seconds", "int", 1,
              "Time span of each controller mutation quota sample.", validator=at_least(1)),
    # --- logs ---
    ConfigDef("log.dirs", "list", None, "Data directories (default: log.dir)."),
    ConfigDef("log.dir", "string", "./data", "Data directory when log.dirs is not set.", kafka_type="list"),
    ConfigDef("num.partitions", "int", 1, "Partitions of auto-created topics.", validator=at_least(1)),
    ConfigDef("default.replication.factor", "int", 1, "Replication factor of auto-created topics."),
    ConfigDef("auto.create.topics.enable", "boolean", True, "Create topics on Metadata requests."),
    ConfigDef("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
    ConfigDef("message.max.bytes", "int", 1048588, "Largest record batch.", dynamic_update=True,
              validator=at_least(0)),
    ConfigDef("log.segment.bytes", "int", 1073741824, "Segment size.", dynamic_update=True,
              validator=at_least(1048576)),
    ConfigDef("log.roll.ms", "long", None, "Segment age before rolling (wins over log.roll.hours).",
              dynamic_update=True, validator=at_least(1)),
    ConfigDef("log.roll.hours", "int", 168, "Segment age before rolling, in hours.", validator=at_least(1)),
    ConfigDef("log.roll.jitter.ms", "long", None, "Random jitter on segment rolling.", dynamic_update=True,
              validator=at_least(0)),
    ConfigDef("log.roll.jitter.hours", "int", 0, "Random jitter on segment rolling, in hours.",
              validator=at_least(0)),
    ConfigDef("log.retention.ms", "long", None, "Retention time (wins over minutes and hours; -1: forever).",
              dynamic_update=True),
    ConfigDef("log.retention.minutes", "int", None, "Retention time in minutes (wins over hours)."),
    ConfigDef("log.retention.hours", "int", 168, "Retention time in hours."),
    ConfigDef("log.retention.bytes", "long", -1, "Retention size per partition (-1: unbounded).",
              dynamic_update=True),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, "How often retention runs.",
              validator=at_least(1)),
    ConfigDef("log.initial.task.delay.ms", "long", 30000, "Delay before the first retention check.",
              validator=at_least(0)),
    ConfigDef("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files go.",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("log.flush.interval.messages", "long", LONG_MAX, "fsync after this many messages.",
              dynamic_update=True, validator=at_least(1)),
    ConfigDef("log.flush.interval.ms", "long", None, "fsync after this long (default: scheduler interval).",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("log.flush.scheduler.interval.ms", "long", LONG_MAX,
              "How often dirty logs are checked for flush."),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", 60000, "Recovery-point checkpoint interval.",
              validator=at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", "int", 60000,
              "Log-start-offset checkpoint interval.", validator=at_least(0)),
    ConfigDef("log.index.interval.bytes", "int", 4096, "Bytes between offset index entries.",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("log.index.size.max.bytes", "int", 10485760, "Largest offset/time index file.",
              dynamic_update=True, validator=at_least(4)),
    ConfigDef("log.preallocate", "boolean", False, "Preallocate segment files.", dynamic_update=True),
    ConfigDef("log.cleanup.policy", "list", ["delete"], "delete and/or compact.", dynamic_update=True,
              validator=one_of("delete", "compact")),
    ConfigDef("log.cleaner.enable", "boolean", True, "Run the log cleaner (compaction)."),
    ConfigDef("log.cleaner.threads", "int", 1, "Cleaner threads.", dynamic_update=True,
              validator=at_least(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", 134217728,
              "Memory of the cleaner's offset map (all cleaner threads).", dynamic_update=True),
    ConfigDef("log.cleaner.backoff.ms", "long", 15000, "Cleaner sleep when idle.", dynamic_update=True,
              validator=at_least(0)),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5, "Dirty ratio that triggers cleaning.",
              dynamic_update=True, validator=between(0, 1)),
    ConfigDef("log.cleaner.delete.retention.ms", "long", 86400000, "Tombstone retention.",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age before compaction.",
              dynamic_update=True, validator=at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum age before compaction.",
              dynamic_update=True, validator=at_least(1)),
    ConfigDef("compression.type", "string", "producer", "Final compression of appended batches.",
              dynamic_update=True, validator=one_of(*_COMPRESSION, case_insensitive=True)),
    ConfigDef("compression.gzip.level", "int", -1, "gzip level (KIP-390).", dynamic_update=True),
    ConfigDef("compression.lz4.level", "int", 9, "lz4 level (KIP-390).", dynamic_update=True,
              validator=between(1, 17)),
    ConfigDef("compression.zstd.level", "int", 3, "zstd level (KIP-390).", dynamic_update=True,
              validator=between(-131072, 22)),
    ConfigDef("log.message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.",
              dynamic_update=True, validator=one_of("CreateTime", "LogAppendTime")),
    ConfigDef("log.message.timestamp.before.max.ms", "long", LONG_MAX,
              "How far in the past a timestamp may be.", dynamic_update=True, validator=at_least(0)),
    # Kafka 4.0 changed this default to one hour (KIP-1030).
    ConfigDef("log.message.timestamp.after.max.ms", "long", 3600000,
              "How far in the future a timestamp may be.", dynamic_update=True, validator=at_least(0)),
    ConfigDef("min.insync.replicas", "int", 1, "Replicas that must acknowledge acks=all.",
              dynamic_update=True, validator=at_least(1)),
    ConfigDef("unclean.leader.election.enable", "boolean", False,
              "Read by the quorum controller: elect a replica outside the ISR when none in it is alive.",
              dynamic_update=True),
    ConfigDef("auto.leader.rebalance.enable", "boolean", True,
              "Read by the quorum controller: move leadership back to preferred replicas."),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300,
              "How often the quorum controller checks for partitions not led by their preferred replica.",
              validator=at_least(1)),
    # --- replication (replica/: leader ISR tracking, replica fetchers; issue 12) ---
    ConfigDef("replica.lag.time.max.ms", "long", 30000,
              "A follower that has not caught up with the leader's log end for this long leaves the ISR.",
              validator=at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, "How long a follower's fetch waits at the leader for data.",
              validator=at_least(0)),
    ConfigDef("replica.fetch.min.bytes", "int", 1, "Bytes a follower's fetch waits for.", validator=at_least(1)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower fetches per partition.",
              validator=at_least(0)),
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760, "Bytes a follower's fetch response may hold.",
              validator=at_least(0)),
    ConfigDef("replica.fetch.backoff.ms", "int", 1000, "Pause after a follower fetch error.",
              validator=at_least(0)),
    ConfigDef("replica.socket.timeout.ms", "int", 30000, "Timeout of a follower's requests to the leader."),
    ConfigDef("num.replica.fetchers", "int", 1, "Fetcher threads (connections) per source broker.", dynamic_update=True,
              validator=at_least(1)),
    ConfigDef("replica.selector.class", "string", None,
              "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector sends consumers with a "
              "client.rack to an in-sync replica in their rack."),
    # --- fetch ---
    ConfigDef("fetch.max.bytes", "int", 57671680, "Largest Fetch response.", validator=at_least(1024)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000,
              "Incremental fetch sessions (KIP-227).", validator=at_least(0)),
    # --- internal topics, groups, transactions ---
    ConfigDef("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.",
              validator=at_least(1)),
    ConfigDef("offsets.topic.replication.factor", "short", 3,
              "Replication of __consumer_offsets (capped to 1).", validator=at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.",
              validator=at_least(1)),
    ConfigDef("offsets.topic.compression.codec", "int", 0, "Compression of offset commits.",
              validator=at_least(0)),
    ConfigDef("offsets.retention.minutes", "int", 10080,
              "Committed offsets of empty groups are kept this long.", validator=at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, "How often expired offsets are removed.",
              validator=at_least(1)),
    ConfigDef("offsets.commit.timeout.ms", "int", 5000, "Offset commit timeout.", validator=at_least(1)),
    ConfigDef("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of a committed offset.",
              validator=at_least(0)),
    ConfigDef("offsets.load.buffer.size", "int", 5242880, "Read size when loading offsets.",
              validator=at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first classic rebalance."),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, "Smallest classic session timeout."),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000, "Largest classic session timeout."),
    ConfigDef("group.max.size", "int", INT_MAX, "Largest classic group.", validator=at_least(1)),
    ConfigDef("group.coordinator.rebalance.protocols", "list", ["classic", "consumer", "streams"],
              "Enabled group protocols.", validator=one_of("classic", "consumer", "share", "streams")),
    ConfigDef("group.coordinator.threads", "int", 4, "Accepted; one event loop.", validator=at_least(1)),
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000, "KIP-848 session timeout.",
              validator=at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", "int", 45000, "KIP-848 smallest session timeout.",
              validator=at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", "int", 60000, "KIP-848 largest session timeout.",
              validator=at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000, "KIP-848 heartbeat interval.",
              validator=at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5000, "KIP-848 smallest heartbeat interval.",
              validator=at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15000, "KIP-848 largest heartbeat interval.",
              validator=at_least(1)),
    ConfigDef("group.consumer.max.size", "int", INT_MAX, "Largest KIP-848 group.", validator=at_least(1)),
    ConfigDef("group.consumer.assignors", "list", ["uniform", "range"], "KIP-848 server-side assignors."),
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional",
              "Online conversion of non-empty groups between the classic and consumer protocols.",
              validator=one_of("disabled", "upgrade", "downgrade", "bidirectional", case_insensitive=True)),
    # Bounds and defaults of group-level configs (the GROUP config resource, kbroker/coord/group_config.py):
    # the assignment intervals and KIP-1071 streams groups (kbroker has no streams groups: these keys only bound
    # group-level configs here).
    ConfigDef("group.consumer.assignment.interval.ms", "int", 1000,
              "The interval between assignment updates for a consumer group.", validator=at_least(0), dynamic_update=True),
    ConfigDef("group.consumer.min.assignment.interval.ms", "int", 0,
              "The minimum interval between assignment updates for a consumer group.", validator=at_least(0)),
    ConfigDef("group.consumer.max.assignment.interval.ms", "int", 15000,
              "The maximum interval between assignment updates for a consumer group.", validator=at_least(0)),
    ConfigDef("group.share.assignment.interval.ms", "int", 1000,
              "The interval between assignment updates for a share group.", validator=at_least(0), dynamic_update=True),
    ConfigDef("group.share.min.assignment.interval.ms", "int", 0,
              "The minimum interval between assignment updates for a share group.", validator=at_least(0)),
    ConfigDef("group.share.max.assignment.interval.ms", "int", 15000,
              "The maximum interval between assignment updates for a share group.", validator=at_least(0)),
    ConfigDef("group.streams.session.timeout.ms", "int", 45000,
              "The timeout to detect client failures when using the streams group protocol.",
              validator=at_least(1)),
    ConfigDef("group.streams.min.session.timeout.ms", "int", 45000,
              "The minimum allowed value for the group-level configuration of streams.session.timeout.ms",
              validator=at_least(1)),
    ConfigDef("group.streams.max.session.timeout.ms", "int", 60000,
              "The maximum allowed value for the group-level configuration of streams.session.timeout.ms",
              validator=at_least(1)),
    ConfigDef("group.streams.heartbeat.interval.ms", "int", 5000, "The heartbeat interval given to the members.",
              validator=at_least(1)),
    ConfigDef("group.streams.min.heartbeat.interval.ms", "int", 5000,
              "The minimum allowed value for the group-level configuration of streams.heartbeat.interval.ms",
              validator=at_least(1)),
    ConfigDef("group.streams.max.heartbeat.interval.ms", "int", 15000,
              "The maximum allowed value for the group-level configuration of streams.heartbeat.interval.ms",
              validator=at_least(1)),
    ConfigDef("group.streams.max.size", "int", INT_MAX,
              "The maximum number of streams clients that a single streams group can accommodate.",
              validator=at_least(1)),
    ConfigDef("group.streams.num.standby.replicas", "int", 0, "The number of standby replicas for each task.",
              validator=at_least(0)),
    ConfigDef("group.streams.max.standby.replicas", "int", 2,
              "The maximum allowed value for the group-level configuration of streams.num.standby.replicas",
              validator=at_least(0)),
    ConfigDef("group.streams.assignment.interval.ms", "int", 1000,
              "The interval between assignment updates for a streams group.", validator=at_least(0), dynamic_update=True),
    ConfigDef("group.streams.min.assignment.interval.ms", "int", 0,
              "The minimum interval between assignment updates for a streams group.", validator=at_least(0)),
    ConfigDef("group.streams.max.assignment.interval.ms", "int", 15000,
              "The maximum interval between assignment updates for a streams group.", validator=at_least(0)),
    ConfigDef("group.streams.initial.rebalance.delay.ms", "int", 3000,
              "The amount of time the group coordinator will wait for more streams clients to join a new group "
              "before performing the first rebalance.", validator=at_least(0)),
    # KIP-932 share groups (Kafka's GroupCoordinatorConfig / ShareGroupConfig); docs/share-groups.md.
    ConfigDef("group.share.session.timeout.ms", "int", 45000, "Share-group member session timeout.",
              validator=at_least(1)),
    ConfigDef("group.share.min.session.timeout.ms", "int", 45000, "Smallest share-group session timeout.",
              validator=at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", "int", 60000, "Largest share-group session timeout.",
              validator=at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of share-group members.",
              validator=at_least(1)),
    ConfigDef("group.share.min.heartbeat.interval.ms", "int", 5000, "Smallest share-group heartbeat interval.",
              validator=at_least(1)),
    ConfigDef("group.share.max.heartbeat.interval.ms", "int", 15000, "Largest share-group heartbeat interval.",
              validator=at_least(1)),
    ConfigDef("group.share.max.size", "int", 200, "Largest share group.", validator=between(1, 1000)),
    ConfigDef("group.share.record.lock.duration.ms", "int", 30000, "Acquisition lock duration of a record.",
              validator=between(1000, 3600000)),
    ConfigDef("group.share.min.record.lock.duration.ms", "int", 15000, "Smallest group record lock duration.",
              validator=between(1000, 30000)),
    ConfigDef("group.share.max.record.lock.duration.ms", "int", 60000, "Largest group record lock duration.",
              validator=between(30000, 3600000)),
    ConfigDef("group.share.delivery.count.limit", "int", 5, "Delivery attempts of a record before it is archived.",
              validator=between(2, 10)),
    ConfigDef("group.share.min.delivery.count.limit", "int", 2, "Smallest group delivery count limit.",
              validator=between(2, 5)),
    ConfigDef("group.share.max.delivery.count.limit", "int", 10, "Largest group delivery count limit.",
              validator=between(5, 25)),
    ConfigDef("group.share.partition.max.record.locks", "int", 2000, "In-flight records per share-partition.",
              validator=between(100, 10000)),
    ConfigDef("group.share.min.partition.max.record.locks", "int", 100,
              "Smallest group record lock limit per share-partition.", validator=between(100, 2000)),
    ConfigDef("group.share.max.partition.max.record.locks", "int", 4000,
              "Largest group record lock limit per share-partition.", validator=between(2000, 10000)),
    ConfigDef("group.share.max.share.sessions", "int", 2000, "Share sessions per broker.",
              validator=at_least(1)),
    # The share coordinator (KIP-932, Kafka's ShareCoordinatorConfig): __share_group_state.
    ConfigDef("share.coordinator.state.topic.num.partitions", "int", 50, "Partitions of __share_group_state.",
              validator=at_least(1)),
    ConfigDef("share.coordinator.state.topic.replication.factor", "short", 3,
              "Replication of __share_group_state.", validator=at_least(1)),
    ConfigDef("share.coordinator.state.topic.min.isr", "short", 2, "min.insync.replicas of __share_group_state.",
              validator=at_least(1)),
    ConfigDef("share.coordinator.state.topic.segment.bytes", "int", 104857600,
              "Segment size of __share_group_state.", validator=at_least(1)),
    ConfigDef("share.coordinator.write.timeout.ms", "int", 5000, "Timeout of a share-state write.",
              validator=at_least(1)),
    ConfigDef("share.coordinator.state.topic.prune.interval.ms", "int", 300000,
              "The duration in milliseconds that the share coordinator will wait between pruning eligible records "
              "in share-group state topic.", validator=at_least(1)),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", "int", 500,
              "The number of update records the share coordinator writes between snapshot records.",
              validator=between(0, 500)),
    ConfigDef("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.",
              validator=at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", "short", 3, "Replication of __transaction_state.",
              validator=at_least(1)),
    ConfigDef("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state.",
              validator=at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state.",
              validator=at_least(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout.",
              validator=at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "How often the transaction coordinator aborts transactions past their timeout.",
              validator=at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
              "How often expired transactional ids are removed.", validator=at_least(1)),
    ConfigDef("transaction.partition.verification.enable", "boolean", True,
              "KIP-890 part 1: a transactional produce to a partition not added to the transaction is refused.",
              dynamic_update=True),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000, "Idle transactional ids expire.",
              validator=at_least(1)),
    ConfigDef("producer.id.expiration.ms", "int", 86400000, "Idle producer ids expire.", dynamic_update=True,
              validator=at_least(1)),
    # --- KRaft broker: joining a cluster of KRaft controllers (kbroker/server/, docs/cluster.md) ---
    # With process.roles=broker these are read; otherwise (single node) they are accepted and ignored.
    ConfigDef("broker.heartbeat.interval.ms", "int", 2000,
              "How often a broker heartbeats to the active controller (BrokerHeartbeat)."),
    ConfigDef("broker.session.timeout.ms", "int", 9000,
              "The controller's: a broker that has not heartbeated for this long is fenced. Read by "
              "controllers; accepted here for documentation."),
    ConfigDef("initial.broker.registration.timeout.ms", "int", 60000,
              "How long a starting broker waits to catch up with the metadata log and register before "
              "it gives up."),
    ConfigDef("controller.quorum.request.timeout.ms", "int", 2000,
              "Timeout of a Raft request (the metadata Fetch / FetchSnapshot) to a controller."),
    ConfigDef("controller.quorum.fetch.timeout.ms", "int", 2000,
              "With no successful metadata fetch from the leader for this long, look for the leader again."),
    ConfigDef("controller.quorum.election.timeout.ms", "int", 1000,
              "A voter that hears from no leader for this long starts an election (Raft)."),
    ConfigDef("controller.quorum.election.backoff.max.ms", "int", 1000,
              "The largest randomized backoff after a lost election (Raft)."),
    ConfigDef("controller.quorum.append.linger.ms", "int", 25,
              "How long the Raft leader lets appended batches wait before it writes them."),
    ConfigDef("controller.quorum.retry.backoff.ms", "int", 20,
              "Wait before retrying a failed Raft request."),
    ConfigDef("controller.socket.timeout.ms", "int", 30000,
              "Timeout of a request to the active controller (registration, heartbeat, forwarded admin "
              "requests, AllocateProducerIds, AlterPartition)."),
    ConfigDef("controlled.shutdown.enable", "boolean", True,
              "A stopping broker first asks the controller to move its leaderships away (BrokerHeartbeat "
              "want_shut_down)."),
    # --- kbroker-specific ---
    ConfigDef("kbroker.max.partitions", "int", 50000,
              "Partitions this broker hosts at most (all topics, internal ones included; -1: no bound). "
              "Kafka has no such bound; each partition holds at least one open file.",
              validator=at_least(-1)),
    ConfigDef("kbroker.sendfile.enable", "boolean", True,
              "kbroker only: send Fetch data with os.sendfile (false: read and write)."),
    ConfigDef("kbroker.request.receive.timeout.ms", "long", 30000,
              "kbroker only: a request frame must fully arrive within this of its first byte, else the "
              "connection is closed (<= 0: no deadline)."),
    ConfigDef("kbroker.shutdown.timeout.ms", "long", 30000,
              "kbroker only: how long a clean shutdown waits for in-flight requests.", validator=at_least(0)),
    ConfigDef("kbroker.metrics.listener", "string", "",
              "kbroker only: http://host:port of the HTTP listener serving /metrics (Prometheus), "
              "/health/live and /health/ready; empty: none (Kafka has no HTTP listener)."),
    ConfigDef("kbroker.metrics.enable", "boolean", True,
              "kbroker only: record broker metrics (false: nothing is recorded, /metrics shows only "
              "collect-time gauges)."),
)
# fmt: on
