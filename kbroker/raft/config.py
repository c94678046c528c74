"""The quorum's static configuration: Kafka's `controller.quorum.*` keys, as `QuorumConfig` (Kafka's class).

`controller.quorum.voters` is the static voter set (`id@host:port,...`, KIP-595); a node whose id is
not in it is an observer (it fetches, never votes). The timeouts keep Kafka's names and defaults:

- `controller.quorum.election.timeout.ms` (1000): how long an unattached voter waits before it
  starts an election; each use is randomized in [timeout, 2 * timeout) (Kafka's `randomElectionTimeoutMs`).
- `controller.quorum.fetch.timeout.ms` (2000): a follower that has not fetched successfully for this
  long starts an election; a leader that has not heard a majority fetch for 1.5 times this long
  resigns (check-quorum, KAFKA-15489).
- `controller.quorum.election.backoff.max.ms` (1000): the largest randomized backoff after a lost
  election (Kafka's exponential backoff, capped here).
- `controller.quorum.request.timeout.ms` (2000): an outbound request with no answer by then failed.
- `controller.quorum.retry.backoff.ms` (20): the wait before a failed request is retried.
- `controller.quorum.append.linger.ms` (25): how long the leader lets appended batches wait before
  it flushes them (its own end offset counts for the high watermark only once flushed).
- `controller.quorum.fetch.max.wait.ms` is not a Kafka key: the leader parks a caught-up follower's
  Fetch for at most 500 ms as Kafka's `KafkaRaftClient.FETCH_MAX_WAIT_MS` does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

ELECTION_TIMEOUT_MS = 1000
FETCH_TIMEOUT_MS = 2000
ELECTION_BACKOFF_MAX_MS = 1000
REQUEST_TIMEOUT_MS = 2000
RETRY_BACKOFF_MS = 20
APPEND_LINGER_MS = 25
FETCH_MAX_WAIT_MS = 500
# Kafka's LeaderState.CHECK_QUORUM_TIMEOUT_FACTOR.
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5
# Kafka's `controller.quorum.fetch.max.bytes`-free default: KafkaRaftClient.MAX_FETCH_SIZE_BYTES (8 MiB).
MAX_FETCH_SIZE_BYTES = 8 * 1024 * 1024
# FetchSnapshot chunk: KafkaRaftClient.MAX_FETCH_SNAPSHOT_SIZE_BYTES (2 MiB).
MAX_FETCH_SNAPSHOT_SIZE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Endpoint:
    """A voter's address on the controller listener."""

    host: str
    port: int
    listener: str = "CONTROLLER"


class InvalidVotersError(ValueError):
    """`controller.quorum.voters` is malformed (Kafka's ConfigException)."""


def parse_voters(value: str) -> dict[int, Endpoint]:
    """Parse `controller.quorum.voters`: `1@host1:9093,2@[::1]:9093` -> {id: Endpoint}."""
    voters: dict[int, Endpoint] = {}
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        node, sep, address = entry.partition("@")
        host, colon, port = address.rpartition(":")
        if not sep or not colon:
            raise InvalidVotersError(f"controller.quorum.voters entry {entry!r} is not of the form id@host:port")
        try:
            node_id, port_num = int(node), int(port)
        except ValueError as e:
            raise InvalidVotersError(f"controller.quorum.voters entry {entry!r}: {e}") from e
        if node_id < 0 or not 0 <= port_num <= 65535 or not host:
            raise InvalidVotersError(f"controller.quorum.voters entry {entry!r} is out of range")
        if node_id in voters:
            raise InvalidVotersError(f"controller.quorum.voters names voter {node_id} twice")
        voters[node_id] = Endpoint(host.strip("[]"), port_num)
    return voters


@dataclass(frozen=True)
class QuorumConfig:
    """Kafka's QuorumConfig for a static voter set."""

    voters: dict[int, Endpoint] = field(default_factory=dict)
    # kraft.version 1 (KIP-853): each voter's ReplicaKey directory id, from the bootstrap VotersRecord
    # (kbroker/raft/voter_set.py). Empty for a static quorum (kraft.version 0: directory ids are zero).
    voter_directory_ids: dict[int, uuid.UUID] = field(default_factory=dict)
    election_timeout_ms: int = ELECTION_TIMEOUT_MS
    fetch_timeout_ms: int = FETCH_TIMEOUT_MS
    election_backoff_max_ms: int = ELECTION_BACKOFF_MAX_MS
    request_timeout_ms: int = REQUEST_TIMEOUT_MS
    retry_backoff_ms: int = RETRY_BACKOFF_MS
    append_linger_ms: int = APPEND_LINGER_MS
    fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS
    max_fetch_bytes: int = MAX_FETCH_SIZE_BYTES
    max_fetch_snapshot_bytes: int = MAX_FETCH_SNAPSHOT_SIZE_BYTES
    # The finalized kraft.version when known (a KRaftVersionRecord in the log or the bootstrap checkpoint);
    # -1: derived from the voters (1 when directory ids are known).
    kraft_version_level: int = -1
    # controller.quorum.bootstrap.servers: where a replica with no known voters (an observer, a controller
    # formatted with --no-initial-controllers) looks for the leader. Ids are Kafka's -2, -3, ... for them.
    bootstrap_servers: dict[int, Endpoint] = field(default_factory=dict)
    # The listener voters are reached on (Kafka: the first of controller.listener.names).
    default_listener: str = "CONTROLLER"

    @classmethod
    def from_props(cls, props: dict[str, str]) -> QuorumConfig:
        """Build from Kafka's keys (missing keys take Kafka's defaults)."""
        def num(key: str, default: int) -> int:
            return int(props.get(key, default))
        return cls(
            voters=parse_voters(props.get("controller.quorum.voters", "")),
            election_timeout_ms=num("controller.quorum.election.timeout.ms", ELECTION_TIMEOUT_MS),
            fetch_timeout_ms=num("controller.quorum.fetch.timeout.ms", FETCH_TIMEOUT_MS),
            election_backoff_max_ms=num("controller.quorum.election.backoff.max.ms", ELECTION_BACKOFF_MAX_MS),
            request_timeout_ms=num("controller.quorum.request.timeout.ms", REQUEST_TIMEOUT_MS),
            retry_backoff_ms=num("controller.quorum.retry.backoff.ms", RETRY_BACKOFF_MS),
            append_linger_ms=num("controller.quorum.append.linger.ms", APPEND_LINGER_MS),
        )

    @property
    def kraft_version(self) -> int:
        """The finalized kraft.version: given, else 1 when the voters came from a VotersRecord (directory
        ids known), else 0."""
        if self.kraft_version_level >= 0:
            return self.kraft_version_level
        return 1 if self.voter_directory_ids else 0

    def voter_directory_id(self, voter_id: int) -> uuid.UUID:
        return self.voter_directory_ids.get(voter_id, uuid.UUID(int=0))

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)

    def majority(self) -> int:
        return len(self.voters) // 2 + 1
