"""Differential: kbroker's controller and Apache Kafka 4.3.1's controller give the same ISR / ELR /
last-known ELR for one scripted sequence of broker fences and unfences (KIP-966), on real processes.

The same four kbroker brokers run under each controller in turn (a kbroker controller formatted by
`kbroker storage format`; Kafka's formatted by `kafka-storage format`; both finalize
eligible.leader.replicas.version=1 and get the cluster-level min.insync.replicas=2 from the controller's
static value). One partition on brokers 2, 3, 4 (2 leads); broker 5 holds no replica and answers
DescribeTopicPartitions throughout. The script mixes clean stops (SIGTERM: controlled shutdown, a
clean-shutdown marker, so the broker re-registers naming its last epoch), kills (SIGKILL: fenced when its
session expires, an unclean restart), restarts, and turning ELR off and on with UpdateFeatures. After
each step the state is read once it has settled (unchanged for a few seconds, and no sooner than a
session timeout after a kill); the two sequences must be equal, step by step.

Slow (two clusters, about 3 minutes each on a quiet 2-core machine).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from kbroker.protocol.messages.describe_topic_partitions import DescribeTopicPartitionsRequest
from kbroker.protocol.messages.update_features import UpdateFeaturesRequest
from tests.support.broker import KBroker
from tests.support.elr_cluster import (
    BROKER_OVERRIDES,
    kafka_controller_brokers,
    kbroker_controller_brokers,
)
from tests.support.java import java_unavailable_reason
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop, pytest.mark.java, pytest.mark.slow]

TOPIC = "elr-diff"
ELR = "eligible.leader.replicas.version"
SESSION_MS = 4000
CONTROLLER_OVERRIDES = {"broker.session.timeout.ms": str(SESSION_MS), "min.insync.replicas": "2",
                        "leader.imbalance.check.interval.seconds": "3600"}
# replica.lag.time.max.ms stays at its default (30 s): a follower slow to start fetching on a loaded
# machine must not be shrunk out of the ISR by the leader (that is timing, not the controller).
# (BROKER_OVERRIDES: tests/support/elr_cluster.py, the same as the other ELR files'.)
BROKERS = (2, 3, 4, 5)
State = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]

# (action, broker or feature level). r0 = 2 (the leader), r1 = 3, r2 = 4.
SCRIPT: tuple[tuple[str, int], ...] = (
    # ELR on (the format's default).
    ("stop", 3), ("kill", 4), ("stop", 2),  # the leader last: an empty ISR, 2 and 4 in the ELR
    ("start", 4),  # unclean restart: it leaves the ELR
    ("start", 2),  # clean restart: elected from the ELR
    ("start", 3),
    # ELR off.
    ("elr", 0),
    ("stop", 3), ("stop", 4), ("stop", 2),  # the last ISR member stays in the ISR
    ("start", 3), ("start", 4), ("start", 2),
    # ELR on again.
    ("elr", 1),
    ("kill", 3), ("kill", 4),
    ("start", 3), ("start", 4),
)


def _kbroker_cluster(tmp_path: Path) -> AbstractContextManager[dict[int, KBroker]]:
    return kbroker_controller_brokers(tmp_path, BROKERS, CONTROLLER_OVERRIDES, BROKER_OVERRIDES)


def _kafka_cluster(tmp_path: Path) -> AbstractContextManager[dict[int, KBroker]]:
    return kafka_controller_brokers(tmp_path, BROKERS, CONTROLLER_OVERRIDES, BROKER_OVERRIDES)


def _state(observer: KBroker) -> State | None:
    req = DescribeTopicPartitionsRequest(topics=[DescribeTopicPartitionsRequest.TopicRequest(name=TOPIC)])
    try:
        with RawKafkaClient(observer.bootstrap, timeout=10) as c:
            resp = c.request(75, 0, req)
    except OSError:
        return None
    if not resp.topics or resp.topics[0].error_code != 0 or not resp.topics[0].partitions:
        return None
    p = resp.topics[0].partitions[0]
    return (p.leader_id, tuple(sorted(p.isr_nodes)), tuple(sorted(p.eligible_leader_replicas or ())),
            tuple(sorted(p.last_known_elr or ())))


def _settle(observer: KBroker, min_wait_s: float, quiet_s: float = 4.0, timeout: float = 90,
            until: Callable[[State], bool] = lambda s: True) -> State:
    """The state once unchanged for `quiet_s` and `until` it (read no sooner than `min_wait_s` from now)."""
    time.sleep(min_wait_s)
    deadline = time.monotonic() + timeout
    last, since = _state(observer), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _state(observer)
        if now != last:
            last, since = now, time.monotonic()
        elif now is not None and time.monotonic() - since >= quiet_s and until(now):
            return now
    raise AssertionError(f"the partition never settled: last {last}")


def _set_elr(observer: KBroker, level: int) -> None:
    u = UpdateFeaturesRequest.FeatureUpdateKey(feature=ELR, max_version_level=level,
                                               upgrade_type=1 if level else 2)
    with RawKafkaClient(observer.bootstrap) as c:
        resp = c.request(57, 1, UpdateFeaturesRequest(timeout_ms=30000, feature_updates=[u], validate_only=False))
    assert resp.error_code == 0, resp


def _run_script(brokers: dict[int, KBroker]) -> list[tuple[str, State]]:
    from confluent_kafka.admin import AdminClient, NewTopic

    observer = brokers[5]
    admin = AdminClient({"bootstrap.servers": observer.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[2, 3, 4]])])[TOPIC].result(30)
    out = [("created", _settle(observer, 1.0, until=lambda s: len(s[1]) == 3))]
    for action, arg in SCRIPT:
        wait = 1.0
        if action == "stop":
            assert brokers[arg].stop(60) == 0
        elif action == "kill":
            brokers[arg].kill()
            wait = SESSION_MS / 1000 + 2.0
        elif action == "start":
            brokers[arg].start(timeout=60)
            wait = 2.0
        else:
            _set_elr(observer, arg)
        out.append((f"{action} {arg}", _settle(observer, wait)))
        print(out[-1], flush=True)
    return out


def _sequence(make: Callable[[Path], AbstractContextManager[dict[int, KBroker]]],
              tmp_path: Path) -> list[tuple[str, State]]:
    with make(tmp_path) as brokers:
        return _run_script(brokers)


@pytest.mark.timeout(1500)
def test_kbroker_and_kafka_controllers_give_the_same_isr_elr_sequence(tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    ours = _sequence(_kbroker_cluster, tmp_path / "kbroker")
    theirs = _sequence(_kafka_cluster, tmp_path / "kafka")
    table = "\n".join(f"{step:10} kbroker {a}  kafka {b}{'' if a == b else '   <-- differs'}"
                      for (step, a), (_, b) in zip(ours, theirs, strict=True))
    print(table)
    assert ours == theirs, table
    # The sequence exercises ELR: somewhere the ISR is empty with members in the ELR.
    assert any(not isr and elr for _, (_, isr, elr, _) in ours), table
