"""Eligible leader replicas (KIP-966) turned off and on with `kafka-features` on real processes.

One kbroker controller (static `min.insync.replicas=2`) and three kbroker brokers, formatted by
`kbroker storage format` (eligible.leader.replicas.version=1 by default, as Kafka 4.3.1's format); the
slow variant runs the same script against Apache Kafka 4.3.1's controller (`kafka-storage format`) over
the same brokers, so every expectation below is also Kafka's. Through a broker (`--bootstrap-server`,
forwarded to the controller):

1. a new cluster with ELR has the cluster-level `min.insync.replicas` (2, the controller's static value:
   Kafka's activation records);
2. `kafka-features downgrade --feature eligible.leader.replicas.version=0`; the cluster-level value can
   then be deleted (refused while ELR is on); `upgrade ...=1` writes it again (Kafka's
   `maybeGenerateElrSafetyRecords`);
3. a topic with RF 3 and min ISR 2 loses two followers: the second one enters the ELR (`kafka-topics
   --describe` prints `Elr: <id>`);
4. ELR turned off: the stored ELR stays (Kafka writes no ClearElrRecord) until the partition's next
   change; the leader then shuts down: without ELR the last ISR member stays in the ISR and the ELR is
   dropped -- `Leader: none  Isr: <leader>  Elr:   LastKnownElr: ` (with ELR on it would be an empty ISR
   and both in the ELR).

And formatted at metadata.version 4.0-IV0, `upgrade --feature eligible.leader.replicas.version=1` fails
with Kafka's message (it depends on metadata.version 4.0-IV1, level 23).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from tests.cluster.test_kbroker_quorum import Quorum, _common, stop_nodes
from tests.support.broker import KBroker
from tests.support.elr_cluster import (
    BROKER_OVERRIDES,
    ElrCluster,
    elr_cluster_fixture,
)
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import new_cluster_id
from tests.support.raw_client import RawKafkaClient
from tests.support.storage_format import format_node

pytestmark = [pytest.mark.interop, pytest.mark.java]

TOPIC = "elr-toggle"
ELR = "eligible.leader.replicas.version"
CONTROLLER_OVERRIDES = {"broker.session.timeout.ms": "4000", "min.insync.replicas": "2"}


cluster = elr_cluster_fixture(CONTROLLER_OVERRIDES)


def _tool(tool: str, *args: str) -> str:
    proc = run_java_main(tool, list(args), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _finalized_elr(bootstrap: str) -> int:
    with RawKafkaClient(bootstrap) as c:
        v = c.request(18, 4, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return next((f.max_version_level for f in v.finalized_features if f.name == ELR), 0)


def _cluster_min_isr(bootstrap: str) -> str | None:
    out = _tool("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "brokers",
                "--entity-default")
    m = re.search(r"^\s*min\.insync\.replicas=(\S+)", out, re.M)
    return m.group(1) if m else None


def _until(what: str, probe: Callable[[], object], want: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last == want:
            return
        time.sleep(0.3)
    raise AssertionError(f"{what}: wanted {want!r}, last {last!r}")


def _describe(bootstrap: str) -> tuple[str, str, str, str]:
    out = _tool("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC)
    line = next(x for x in out.splitlines() if "Partition:" in x)
    f = {k: v.strip() for k, v in re.findall(r"(\w+): ?([^\t]*)", line)}
    return f["Leader"], f["Isr"], f["Elr"], f["LastKnownElr"]


def _isr(bootstrap: str) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    p = t.partitions[0]
    return p.leader, tuple(p.replicas), tuple(sorted(p.isrs))


def test_kafka_features_turns_elr_off_and_on(cluster: ElrCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = cluster.bootstrap
    # 1. ELR on from the format, with the cluster-level min.insync.replicas of the activation records.
    assert _finalized_elr(bootstrap.split(",")[0]) == 1
    assert _cluster_min_isr(bootstrap) == "2"

    # 2. Off, the cluster-level value deleted, on again: it comes back.
    out = _tool("kafka-features", "--bootstrap-server", bootstrap, "downgrade", "--feature", f"{ELR}=0")
    assert out.strip() == f"{ELR} was downgraded to 0."
    _until("finalized ELR level", lambda: _finalized_elr(bootstrap.split(",")[0]), 0)
    _tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
          "--entity-default", "--delete-config", "min.insync.replicas")
    _until("cluster-level min.insync.replicas", lambda: _cluster_min_isr(bootstrap), None)
    out = _tool("kafka-features", "--bootstrap-server", bootstrap, "upgrade", "--feature", f"{ELR}=1")
    assert out.strip() == f"{ELR} was upgraded to 1."
    _until("cluster-level min.insync.replicas", lambda: _cluster_min_isr(bootstrap), "2")
    # With ELR on the cluster-level value cannot be removed (Kafka's message).
    proc = run_java_main("kafka-configs", ["--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
                                           "--entity-default", "--delete-config", "min.insync.replicas"],
                         timeout=120)
    assert "Cluster-level min.insync.replicas cannot be removed while ELR is enabled." in proc.stdout + proc.stderr

    # 3. ELR on: the ISR shrinks into the ELR.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)  # min ISR 2 from the cluster level
    _until("full ISR", lambda: (lambda s: s is not None and s[0] >= 0 and len(s[2]) == 3)(_isr(bootstrap)), True)
    state = _isr(bootstrap)
    assert state is not None
    r0, r1, r2 = state[1]
    nodes = cluster.brokers
    assert nodes[r1].stop(60) == 0
    _until("ISR without r1", lambda: (_isr(nodes[r0].bootstrap) or (0, (), ()))[2], tuple(sorted((r0, r2))))
    assert nodes[r2].stop(60) == 0
    _until("ISR of the leader alone", lambda: (_isr(nodes[r0].bootstrap) or (0, (), ()))[2], (r0,))
    assert _describe(nodes[r0].bootstrap) == (str(r0), str(r0), str(r2), "")

    # 4. ELR off: no ClearElrRecord, the stored ELR stays until the partition changes.
    out = _tool("kafka-features", "--bootstrap-server", nodes[r0].bootstrap, "downgrade", "--feature", f"{ELR}=0")
    assert out.strip() == f"{ELR} was downgraded to 0."
    _until("finalized ELR level", lambda: _finalized_elr(nodes[r0].bootstrap), 0)
    assert _describe(nodes[r0].bootstrap) == (str(r0), str(r0), str(r2), "")
    # The leader shuts down: with ELR off it stays the ISR, and the ELR is dropped.
    assert nodes[r0].stop(60) == 0
    nodes[r1].start(timeout=60)  # not in the ISR: no leader without unclean election
    _until("partition after the leader left", lambda: _describe(nodes[r1].bootstrap), ("none", str(r0), "", ""),
           timeout=90)


def _format_release(q: Quorum, node: KBroker, release_version: str) -> None:
    format_node(node, q.cluster_id, node.overrides, "--release-version", release_version)


def test_metadata_version_too_old_for_elr(tmp_path: Path) -> None:
    """Formatted at 4.0-IV0 (metadata.version 22: ELR off, as Kafka's format leaves it), ELR cannot be
    turned on: it needs 4.0-IV1 (Kafka's `Feature.validateVersion` message), and nothing changes."""
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    q = Quorum(new_cluster_id(), tmp_path)
    c = q.controllers[1] = KBroker(tmp_path / "controller-1")
    b = q.brokers[2] = KBroker(tmp_path / "broker-2")
    c.overrides = {**_common(q), "process.roles": "controller", "node.id": "1",
                   "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir)}
    b.overrides = {**_common(q), "process.roles": "broker", "node.id": "2",
                   "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir), **BROKER_OVERRIDES}
    for node in (c, b):
        _format_release(q, node, "4.0-IV0")
    try:
        c.start(timeout=60)
        q.wait_leader()
        b.start(timeout=60)
        assert _finalized_elr(b.bootstrap) == 0
        proc = run_java_main("kafka-features", ["--bootstrap-server", b.bootstrap, "upgrade", "--feature", f"{ELR}=1"],
                             timeout=120)
        assert proc.returncode != 0
        assert proc.stdout.strip().splitlines()[0] == (
            f"Could not upgrade {ELR} to 1. The update failed for all features since the following feature had an "
            f"error: Invalid update version 1 for feature {ELR}. {ELR} could not be set to 1 because it depends "
            "on metadata.version level 23"), proc.stdout + proc.stderr
        assert _finalized_elr(b.bootstrap) == 0
        assert _cluster_min_isr(b.bootstrap) is None
    finally:
        stop_nodes([b], [c])
