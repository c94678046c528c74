"""MetadataFetcher (kbroker/server/metadata_fetcher.py): a broker's Raft-observer fetch of
`__cluster_metadata`, driven here by hand-made Fetch answers (the interop tests in tests/cluster drive it
against Kafka's controller): what it asks, what it appends, what it hands the loader (only what is below
the leader's high watermark), how it follows the leader and truncates a diverging tail, and how a
snapshot replaces the image."""

from __future__ import annotations

import uuid
from pathlib import Path

from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.loader import MetadataLoader
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.fetch import FetchResponse
from kbroker.protocol.metadata_records import FeatureLevelRecord, PartitionRecord, TopicRecord
from kbroker.protocol.metadata_records.serde import encode_metadata_record
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.raft.metadata_log import KafkaMetadataLog
from kbroker.raft.raft_log import OffsetAndEpoch
from kbroker.server.metadata_fetcher import METADATA_TOPIC_ID, LeaderAndEpoch, MetadataFetcher
from kbroker.server.settings import KRaftBrokerSettings, QuorumNode

DIR_ID = uuid.UUID(int=99)
T1 = uuid.UUID(int=1001)
T2 = uuid.UUID(int=1002)


def settings() -> KRaftBrokerSettings:
    return KRaftBrokerSettings(node_id=3, cluster_id="cid", voters=(QuorumNode(1, "127.0.0.1", 9093),),
                               bootstrap_servers=(), controller_listener_name="CONTROLLER", rack=None,
                               log_dir_ids=(DIR_ID,), metadata_directory_id=DIR_ID)


def batch(base_offset: int, epoch: int, *records: object) -> bytes:
    return bytes(build_batch([SimpleRecord(encode_metadata_record(r), None, 1000) for r in records],
                             base_offset=base_offset, partition_leader_epoch=epoch, now_ms=1000))


def topic(name: str, topic_id: uuid.UUID) -> list[object]:
    return [TopicRecord(name=name, topic_id=topic_id),
            PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[3], isr=[3], leader=3, leader_epoch=0,
                            partition_epoch=0, directories=[DIR_ID])]


def answer(records: bytes | None = None, hw: int = 0, error: ErrorCode = ErrorCode.NONE, leader: int = 1,
           epoch: int = 1, diverging: tuple[int, int] | None = None,
           snapshot: tuple[int, int] | None = None) -> FetchResponse:
    part = FetchResponse.PartitionData(partition_index=0, error_code=int(error), high_watermark=hw, records=records,
                                       current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=leader,
                                                                                     leader_epoch=epoch))
    if diverging is not None:
        part.diverging_epoch = FetchResponse.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
    if snapshot is not None:
        part.snapshot_id = FetchResponse.SnapshotId(end_offset=snapshot[0], epoch=snapshot[1])
    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID,
                                                                         partitions=[part])],
                         node_endpoints=[FetchResponse.NodeEndpoint(node_id=1, host="127.0.0.1", port=9093)])


def fetcher(tmp_path: Path) -> tuple[MetadataFetcher, MetadataCache]:
    cache = MetadataCache(3)
    loader = MetadataLoader()
    loader.install_publishers([cache])
    return MetadataFetcher(settings(), KafkaMetadataLog(tmp_path), loader), cache


def test_the_fetch_is_an_observer_fetch_of_the_metadata_partition(tmp_path: Path) -> None:
    f, _ = fetcher(tmp_path)
    req = f.build_fetch_request(17)
    assert req.cluster_id == "cid"
    assert req.replica_state.replica_id == 3 and req.replica_id == -1  # v15+: replica_state (KIP-903)
    assert f.build_fetch_request(13).replica_id == 3
    [t] = req.topics
    assert t.topic_id == METADATA_TOPIC_ID and t.topic == "__cluster_metadata"
    [p] = t.partitions
    assert (p.partition, p.fetch_offset, p.last_fetched_epoch, p.replica_directory_id) == (0, 0, 0, DIR_ID)
    assert req.max_wait_ms == 500


def test_only_batches_below_the_high_watermark_reach_the_image(tmp_path: Path) -> None:
    f, cache = fetcher(tmp_path)
    data = (batch(0, 1, FeatureLevelRecord(name="metadata.version", feature_level=30))
            + batch(1, 1, *topic("a", T1)) + batch(3, 1, *topic("b", T2)))
    f.handle_fetch_response(answer(data, hw=3), None)
    assert f.metadata_log.end_offset() == 5
    assert cache.topic("a") is not None and cache.topic("b") is None  # b's batch is above the HW
    # Caught up means: everything the leader has committed is applied (its high watermark is 3).
    assert f.applied_offset == 2 and f.caught_up.is_set()
    # The next fetch continues at the log end, with the last batch's epoch.
    p = f.build_fetch_request(17).topics[0].partitions[0]
    assert (p.fetch_offset, p.last_fetched_epoch) == (5, 1)
    f.handle_fetch_response(answer(None, hw=5), None)
    assert cache.topic("b") is not None
    # A fetch that stops below the leader's high watermark (max_bytes) is not caught up yet.
    behind, _ = fetcher(tmp_path / "behind")
    behind.handle_fetch_response(answer(batch(0, 1, *topic("a", T1)), hw=10), None)
    assert behind.applied_offset == 1 and not behind.caught_up.is_set()
    assert f.applied_offset == 4
    assert cache.image.provenance.last_contained_offset == 4


def test_the_leader_is_learned_from_fenced_epoch_answers(tmp_path: Path) -> None:
    f, _ = fetcher(tmp_path)
    f.handle_fetch_response(answer(error=ErrorCode.FENCED_LEADER_EPOCH, leader=1, epoch=5), None)
    assert (f.leader.leader_id, f.leader.epoch) == (1, 5)
    assert f.leader.endpoint == QuorumNode(1, "127.0.0.1", 9093)
    assert f.build_fetch_request(17).topics[0].partitions[0].current_leader_epoch == 5
    # An older epoch never replaces a newer one.
    f.handle_fetch_response(answer(error=ErrorCode.NOT_LEADER_OR_FOLLOWER, leader=2, epoch=4), None)
    assert (f.leader.leader_id, f.leader.epoch) == (1, 5)
    f.forget_leader(1)
    assert f.leader.endpoint is None


def test_a_diverging_epoch_truncates_the_uncommitted_tail(tmp_path: Path) -> None:
    f, cache = fetcher(tmp_path)
    data = batch(0, 1, *topic("a", T1)) + batch(2, 2, *topic("stale", T2))
    f.handle_fetch_response(answer(data, hw=2, epoch=2), None)
    assert f.metadata_log.end_offset() == 4 and cache.topic("a") is not None
    # A new leader (epoch 3) never had offsets 2-3 of epoch 2: its epoch 2 ended at offset 2.
    f.handle_fetch_response(answer(hw=2, epoch=3, diverging=(2, 2)), None)
    assert f.metadata_log.end_offset() == 2
    assert cache.topic("stale") is None and cache.topic("a") is not None
    p = f.build_fetch_request(17).topics[0].partitions[0]
    assert (p.fetch_offset, p.last_fetched_epoch) == (2, 1)
    # A diverging point below what is committed is refused (committed records never diverge).
    f.handle_fetch_response(answer(hw=2, epoch=3, diverging=(1, 1)), None)
    assert f.metadata_log.end_offset() == 2


def test_a_snapshot_replaces_the_image_and_the_log_starts_at_its_end(tmp_path: Path) -> None:
    f, cache = fetcher(tmp_path)
    f.handle_fetch_response(answer(batch(0, 1, *topic("old", T1)), hw=2), None)
    assert cache.topic("old") is not None
    f.handle_fetch_response(answer(hw=100, snapshot=(100, 4)), None)
    snap = f._pending_snapshot
    assert snap == OffsetAndEpoch(100, 4)
    blob = batch(0, 4, FeatureLevelRecord(name="metadata.version", feature_level=30), *topic("new", T2))
    f.metadata_log.install_snapshot(snap, blob)
    deleted: list[str] = []

    class Deletions:
        name = "deletions"

        def on_metadata_update(self, delta: object, image: object, manifest: object) -> None:
            topics = getattr(delta, "topics_delta", None)
            if topics is not None:
                deleted.extend(t.name for t in topics.deleted_topics())

    f.loader.install_publishers([Deletions()])
    f._load_snapshot_bytes(snap, blob)
    f.next_commit_offset = snap.offset
    assert cache.topic("new") is not None and cache.topic("old") is None
    # The publishers were told that "old" is gone (the snapshot lacks it), as Kafka's finishSnapshot does.
    assert deleted == ["old"]
    assert cache.image.provenance.last_contained_offset == 99
    p = f.build_fetch_request(17).topics[0].partitions[0]
    assert (p.fetch_offset, p.last_fetched_epoch) == (100, 4)
    # After a restart the snapshot is the starting image.
    f.metadata_log.close()
    again, cache2 = fetcher(tmp_path)
    again.load_local()
    assert cache2.topic("new") is not None and again.next_commit_offset == 100


def test_the_fetch_loop_fails_over_to_the_new_leader(tmp_path: Path) -> None:
    """The leader (node 1) goes away: the fetcher forgets it, asks the voters in turn, follows node 2's
    answer (FENCED_LEADER_EPOCH naming itself in epoch 6) and fetches from it."""
    import asyncio

    from kbroker.client import ConnectionClosedError
    from kbroker.protocol.messages.fetch import FetchRequest

    sent: list[tuple[int, int, int]] = []  # (port, fetch offset, current leader epoch)

    class Conn:
        def __init__(self, host: str, port: int) -> None:
            self.port = port
            self.connected = False

        async def connect(self) -> None:
            if self.port == 9001:
                raise ConnectionClosedError("node 1 is down")
            self.connected = True

        def version_for(self, api_key: int) -> int:
            return 17

        async def request(self, api_key: int, body: FetchRequest, response_type: type[object],
                          **_: object) -> FetchResponse:
            p = body.topics[0].partitions[0]
            sent.append((self.port, p.fetch_offset, p.current_leader_epoch))
            if p.current_leader_epoch < 6:
                return answer(error=ErrorCode.FENCED_LEADER_EPOCH, leader=2, epoch=6)
            if p.fetch_offset == 0:
                return answer(batch(0, 6, *topic("a", T1)), hw=2, leader=2, epoch=6)
            await asyncio.sleep(0.05)
            return answer(None, hw=2, leader=2, epoch=6)

        async def close(self) -> None:
            self.connected = False

    s = KRaftBrokerSettings(node_id=3, cluster_id="cid", voters=(QuorumNode(1, "h", 9001), QuorumNode(2, "h", 9002)),
                            bootstrap_servers=(), controller_listener_name="CONTROLLER", rack=None,
                            log_dir_ids=(DIR_ID,), metadata_directory_id=DIR_ID, quorum_retry_backoff_ms=1)
    cache = MetadataCache(3)
    loader = MetadataLoader()
    loader.install_publishers([cache])
    f = MetadataFetcher(s, KafkaMetadataLog(tmp_path), loader, connection_factory=Conn)  # type: ignore[arg-type]

    async def run() -> None:
        f._set_leader(LeaderAndEpoch(1, 5, QuorumNode(1, "h", 9001)))
        f.start()
        await f.wait_caught_up(5)
        await f.barrier(5)
        await f.close()

    asyncio.run(run())
    assert (f.leader.leader_id, f.leader.epoch) == (2, 6)
    assert f.leader.endpoint == QuorumNode(2, "h", 9002)
    assert cache.topic("a") is not None
    assert sent[0] == (9002, 0, 5)  # node 1 refused the connection; node 2 said who leads now
    assert (9002, 0, 6) in sent and sent[-1][1] == 2
