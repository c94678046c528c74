"""Turning eligible leader replicas (KIP-966) on and off with UpdateFeatures, on a fake clock.

What Kafka 4.3.1's controller does (QuorumController.updateFeatures ->
ConfigurationControlManager.updateFeatures -> FeatureControlManager.updateFeatures; the
ActivationRecordsGenerator for a new log):
- a bootstrap with `eligible.leader.replicas.version` 1 also writes the cluster-level
  `min.insync.replicas` (the static value);
- upgrading to 1 writes, in one batch, the cluster-level `min.insync.replicas` if absent, a null record
  for every broker-level one, then the FeatureLevelRecord (`maybeGenerateElrSafetyRecords`);
- downgrading to 0 writes only the FeatureLevelRecord (no ClearElrRecord): the partitions keep their
  ELR / last-known ELR until their next change, which drops them; the last ISR member fenced then stays
  in the ISR, as without ELR; upgraded again, the ISR shrinks into the ELR again;
- Kafka's validation errors: a metadata.version below 4.0-IV1 (level 23), a downgrade with upgrade type
  UPGRADE, an upgrade with a downgrade type, a broker that does not support the level.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

import pytest

from kbroker.controller.feature_control import UPGRADE_TYPE_SAFE_DOWNGRADE, UPGRADE_TYPE_UPGRADE
from kbroker.controller.quorum_controller import QuorumController
from kbroker.metadata.image import NO_LEADER
from kbroker.metadata.views import BROKER_RESOURCE
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import ClearElrRecord, ConfigRecord, FeatureLevelRecord
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, join, new_controller
from tests.controller.test_elr_controller import Cluster

ELR = "eligible.leader.replicas.version"
MIN_ISR = "min.insync.replicas"


def _run(controller: QuorumController, raft: InMemoryRaftLog,
         make: Callable[[], Coroutine[object, object, object]]) -> list[object]:
    """Run one controller write to completion; the records of the batches it appended."""
    before = len(raft.batches)

    async def go() -> None:
        task = asyncio.ensure_future(make())
        await asyncio.sleep(0)
        raft.commit()
        await task

    asyncio.run(go())
    return [r for batch in raft.batches[before:] for r in batch.records]


def _update(c: Cluster, level: int, upgrade_type: int, validate_only: bool = False) -> list[object]:
    return _run(c.controller, c.raft, lambda: c.controller.update_features({ELR: (level, upgrade_type)},
                                                                           validate_only))


def _cluster_min_isr(controller: QuorumController) -> str | None:
    return controller.committed_image.configs.cluster_broker_config().get(MIN_ISR)


def test_bootstrap_with_elr_writes_the_cluster_level_min_isr() -> None:
    on = Cluster(elr=True, min_isr=2)
    first = next(b for b in on.raft.batches if b.records).records  # the bootstrap batch
    assert first[-1] == ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR, value="2")
    assert FeatureLevelRecord(name=ELR, feature_level=1) in first
    assert _cluster_min_isr(on.controller) == "2"
    off = Cluster(elr=False, min_isr=2)
    assert _cluster_min_isr(off.controller) is None


def test_enable_writes_the_safety_records_first_in_one_batch() -> None:
    c = Cluster(elr=False, min_isr=2)
    # While ELR is off a broker-level min.insync.replicas is allowed (the controller's own node id here).
    _run(c.controller, c.raft, lambda: c.controller.alter_broker_configs(False, {MIN_ISR: "1"}))
    node = str(c.controller.node_id)
    assert c.controller.committed_image.configs.broker_config(int(node)).get(MIN_ISR) == "1"
    # Validate-only: nothing is written.
    assert _update(c, 1, UPGRADE_TYPE_UPGRADE, validate_only=True) == []
    assert not c.controller.is_elr_enabled()

    batches_before = len(c.raft.batches)
    written = _update(c, 1, UPGRADE_TYPE_UPGRADE)
    assert len(c.raft.batches) == batches_before + 1  # atomic
    assert written == [
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR, value="2"),
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=node, name=MIN_ISR, value=None),
        FeatureLevelRecord(name=ELR, feature_level=1),
    ]
    assert c.controller.is_elr_enabled()
    assert _cluster_min_isr(c.controller) == "2"
    assert MIN_ISR not in c.controller.committed_image.configs.broker_config(int(node))
    # Already safe: upgrading again writes only the FeatureLevelRecord (Kafka writes it even unchanged).
    assert _update(c, 1, UPGRADE_TYPE_UPGRADE) == [FeatureLevelRecord(name=ELR, feature_level=1)]


def test_disable_writes_only_the_feature_level_and_partitions_drop_elr_at_their_next_change() -> None:
    c = Cluster(elr=True)
    c.create()
    r0, r1, r2 = c.partition().replicas
    c.fence(r1, [r0, r2])
    c.fence(r2, [r0])
    assert c.state() == (r0, (r0,), (r2,), ())

    written = _update(c, 0, UPGRADE_TYPE_SAFE_DOWNGRADE)
    assert written == [FeatureLevelRecord(name=ELR, feature_level=0)]
    assert not any(isinstance(r, ClearElrRecord) for r in written)
    assert not c.controller.is_elr_enabled()
    # Kafka leaves the stored ELR alone until the partition changes.
    assert c.state() == (r0, (r0,), (r2,), ())
    # The cluster-level min.insync.replicas may be removed again.
    _run(c.controller, c.raft, lambda: c.controller.alter_broker_configs(True, {MIN_ISR: None}))
    assert _cluster_min_isr(c.controller) is None
    # The last ISR member fenced: without ELR it stays in the ISR, and the stale ELR is dropped.
    c.fence(r0, [])
    assert c.state() == (NO_LEADER, (r0,), (), ())


def test_off_no_elr_on_isr_shrink_and_on_again_the_isr_shrinks_into_the_elr() -> None:
    c = Cluster(elr=True, min_isr=2)
    assert _update(c, 0, UPGRADE_TYPE_SAFE_DOWNGRADE) == [FeatureLevelRecord(name=ELR, feature_level=0)]
    c.create("t")
    r0, r1, r2 = c.partition("t").replicas
    c.fence(r1, [r0, r2])
    c.fence(r2, [r0])
    assert c.state() == (r0, (r0,), (), ())  # below min ISR, but no ELR with the feature off
    for b in (r1, r2):
        c.restart(b, clean=True)
    # The cluster-level min.insync.replicas is still there: the upgrade writes only the feature level.
    assert _update(c, 1, UPGRADE_TYPE_UPGRADE) == [FeatureLevelRecord(name=ELR, feature_level=1)]
    c.create("t2")
    s0, s1, s2 = c.partition("t2").replicas
    alive = [1, 2, 3]
    for b in (s1, s2):
        alive.remove(b)
        c.fence(b, alive)
    p = c.partition("t2")
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (s0, (s0,), (s2,), ())


def _expect_invalid(c: Cluster, level: int, upgrade_type: int, message: str) -> None:
    with pytest.raises(KafkaError) as e:
        _update(c, level, upgrade_type)
    assert e.value.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert str(e.value) == ("The update failed for all features since the following feature had an error: "
                            f"Invalid update version {level} for feature {ELR}. {message}")


def test_kafka_validation_errors() -> None:
    c = Cluster(elr=True)
    _expect_invalid(c, 0, UPGRADE_TYPE_UPGRADE, "Can't downgrade the version of this feature without setting "
                    "the upgrade type to either safe or unsafe downgrade.")
    _expect_invalid(c, 2, UPGRADE_TYPE_UPGRADE, "Local controller 3000 only supports versions 0-1")
    _expect_invalid(c, 1, 0, "The controller does not support the given upgrade type.")
    _expect_invalid(c, -1, UPGRADE_TYPE_SAFE_DOWNGRADE, "A feature version cannot be less than 0.")
    off = Cluster(elr=False)
    _expect_invalid(off, 1, UPGRADE_TYPE_SAFE_DOWNGRADE, "Can't downgrade to a newer version.")
    assert c.controller.is_elr_enabled() and not off.controller.is_elr_enabled()


def test_metadata_version_too_old_for_elr() -> None:
    """metadata.version 4.0-IV0 (22): ELR 1 needs 4.0-IV1 (23), Kafka's `Feature.validateVersion`."""
    clock = FakeClock()
    controller, raft = new_controller(clock, bootstrap=(
        FeatureLevelRecord(name="metadata.version", feature_level=22),
        FeatureLevelRecord(name="group.version", feature_level=1)))
    with pytest.raises(KafkaError) as e:
        _run(controller, raft, lambda: controller.update_features({ELR: (1, UPGRADE_TYPE_UPGRADE)}))
    assert e.value.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert str(e.value).endswith("Invalid update version 1 for feature eligible.leader.replicas.version. "
                                 "eligible.leader.replicas.version could not be set to 1 because it depends on "
                                 "metadata.version level 23")
    assert controller.committed_image.features.level(ELR) == 0
    assert _cluster_min_isr(controller) is None


def test_a_broker_that_does_not_support_elr_blocks_the_upgrade() -> None:
    clock = FakeClock()
    controller, raft = new_controller(clock)  # ELR 0; quorum_fakes.registration declares no ELR range
    join(controller, raft, 1)
    with pytest.raises(KafkaError, match=r"Invalid update version 1 for feature eligible.leader.replicas.version. "
                                         r"Broker 1 does not support this feature.$"):
        _run(controller, raft, lambda: controller.update_features({ELR: (1, UPGRADE_TYPE_UPGRADE)}))
    # Level 0 is in every range: disabling is always allowed.
    assert _run(controller, raft, lambda: controller.update_features({ELR: (0, UPGRADE_TYPE_SAFE_DOWNGRADE)})) == [
        FeatureLevelRecord(name=ELR, feature_level=0)]


def test_a_snapshot_taken_with_elr_off_leaves_the_leftover_elrs_out() -> None:
    """Kafka's PartitionRegistration.toRecord writes ELR / last-known ELR only while the feature is on."""
    from kbroker.metadata.image_writer import image_records
    from kbroker.protocol.metadata_records import PartitionRecord

    c = Cluster(elr=True)
    c.create()
    r0, r1, r2 = c.partition().replicas
    c.fence(r1, [r0, r2])
    c.fence(r2, [r0])

    def snapshot_elr() -> list[object]:
        return [r.eligible_leader_replicas for r in image_records(c.controller.committed_image)
                if isinstance(r, PartitionRecord)]

    assert snapshot_elr() == [[r2]]
    _update(c, 0, UPGRADE_TYPE_SAFE_DOWNGRADE)
    assert c.partition().elr == (r2,)  # still in the image ...
    assert snapshot_elr() == [None]  # ... not in a snapshot of it
