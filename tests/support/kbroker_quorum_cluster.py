"""Three kbroker controllers (a static Raft quorum) and three replicating kbroker brokers, with controller faults.

Owns: starting the all-kbroker cluster (controllers through `MixedQuorum("kkk")`, brokers formatted by
`kbroker storage format`), asking the quorum who leads with DescribeQuorum (API 55, sent to every
running controller: only the leader answers NONE, as Kafka's KafkaRaftClient does), and the controller
faults of the fault matrix -- {clean shutdown, kill -9, bounce} x {the active controller, a follower
controller} -- each returning what heals it (`tests/support/fault_matrix.py`'s `Inject`).

A fault on the active controller measures the failover: from the signal until a surviving voter answers
DescribeQuorum as the leader of a newer epoch. Healing restarts the controller, waits until every voter's
log end offset reached the leader's high watermark, and checks that every broker still lists all the
brokers (none fenced: a new active controller gives each broker a full session timeout, as Kafka's
BrokerHeartbeatManager does on activation) and that partition 0..2's ISR is whole again.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kbroker.client import NodeConnection
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.support.broker import KBroker
from tests.support.fault_matrix import Heal, ReplicatedBrokers, broker_fault
from tests.support.mixed_quorum import MixedQuorum, kbroker_format

CONTROLLER_ROLES = ("active-controller", "follower-controller")
CONTROLLER_MATRIX = [(kind, role) for kind in ("stop", "kill", "bounce") for role in CONTROLLER_ROLES]


@dataclass(frozen=True)
class QuorumView:
    leader: int
    epoch: int
    high_watermark: int
    voters: dict[int, int]  # voter id -> log end offset, as the leader reports it


@dataclass(frozen=True)
class Failover:
    kind: str
    old_leader: int
    new_leader: int
    seconds: float


async def _describe_quorum(port: int) -> DescribeQuorumResponse:
    conn = NodeConnection("127.0.0.1", port, client_id="fault-matrix")
    await asyncio.wait_for(conn.connect(), 5)
    try:
        req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
        return await asyncio.wait_for(conn.request(55, req, DescribeQuorumResponse), 5)
    finally:
        await conn.close()


async def _metadata_brokers(port: int) -> list[int]:
    conn = NodeConnection("127.0.0.1", port, client_id="fault-matrix")
    await asyncio.wait_for(conn.connect(), 5)
    try:
        resp = await asyncio.wait_for(conn.request(3, MetadataRequest(topics=[]), MetadataResponse), 5)
        return sorted(b.node_id for b in resp.brokers)
    finally:
        await conn.close()


def describe_quorum(quorum: MixedQuorum) -> QuorumView | None:
    """The leader's view, from whichever running controller (of either kind) answers DescribeQuorum as
    the leader; None while no voter leads."""
    for i, node in quorum.controllers.items():
        if not quorum.is_running(node):
            continue
        try:
            resp = asyncio.run(_describe_quorum(node.port))
        except (OSError, TimeoutError, ConnectionError):
            continue
        if resp.error_code != 0 or not resp.topics or not resp.topics[0].partitions:
            continue
        p = resp.topics[0].partitions[0]
        if p.error_code == 0 and p.leader_id == i:
            return QuorumView(p.leader_id, p.leader_epoch, p.high_watermark,
                              {v.replica_id: v.log_end_offset for v in p.current_voters})
    return None


class KbrokerQuorumCluster(ReplicatedBrokers):
    """Controllers 1, 2, 3 (kbroker, `process.roles=controller`) and brokers `broker_ids` (kbroker)."""

    def __init__(self, workdir: Path, broker_ids: tuple[int, ...], broker_overrides: dict[str, str],
                 controller_overrides: dict[str, str], failover_bound_s: float) -> None:
        self.quorum = MixedQuorum(workdir, "kkk", controller_overrides)
        self.broker_ids = broker_ids
        self.broker_overrides = broker_overrides
        self.failover_bound_s = failover_bound_s
        self.failovers: list[Failover] = []
        super().__init__({}, workdir)

    def start(self) -> None:
        """Format and start the three controllers together, then the three brokers together (one after
        the other, each waiting for the last, took 25 s of a loaded 2-core machine instead of 10)."""
        q = self.quorum
        controllers = [self.controller(i) for i in q.controllers]
        for i, c in zip(q.controllers, controllers, strict=True):
            c.overrides = q._kbroker_controller_props(i, c)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda c: kbroker_format(c, q.cluster_id, c.overrides), controllers))
            list(pool.map(lambda c: c.start(timeout=90), controllers))
            self.wait_active()
            for i in self.broker_ids:
                b = q.add_kbroker_broker(i)  # formats it
                b.overrides.update(self.broker_overrides)
                self.brokers[i] = b
            list(pool.map(lambda b: b.start(timeout=90), self.brokers.values()))

    def stop_all(self) -> None:
        self.quorum.stop_all()

    def controller(self, node_id: int) -> KBroker:
        c = self.quorum.controllers[node_id]
        assert isinstance(c, KBroker)
        return c

    # -- the quorum, through DescribeQuorum ---------------------------------------------------------

    def describe_quorum(self) -> QuorumView | None:
        return describe_quorum(self.quorum)

    def wait_active(self, after_epoch: int = -1, not_leader: int | None = None,
                    timeout: float = 60.0) -> QuorumView:
        deadline = time.monotonic() + timeout
        while True:
            view = self.describe_quorum()
            if view is not None and view.epoch > after_epoch and view.leader != not_leader:
                return view
            assert time.monotonic() < deadline, f"no active controller after epoch {after_epoch}: {view}"
            time.sleep(0.05)

    def wait_quorum_caught_up(self, timeout: float = 60.0) -> QuorumView:
        deadline = time.monotonic() + timeout
        while True:
            view = self.describe_quorum()
            if view is not None and len(view.voters) == 3 and \
                    all(leo >= view.high_watermark for leo in view.voters.values()):
                return view
            assert time.monotonic() < deadline, f"the voters did not catch up: {view}"
            time.sleep(0.2)

    def wait_brokers_unfenced(self, timeout: float = 60.0) -> None:
        """Every broker's Metadata lists every broker (a fenced broker is left out of Metadata)."""
        want = sorted(self.brokers)
        deadline = time.monotonic() + timeout
        for b in self.brokers.values():
            while True:
                try:
                    got = asyncio.run(_metadata_brokers(b.port))
                except (OSError, TimeoutError, ConnectionError):
                    got = []
                if got == want:
                    break
                assert time.monotonic() < deadline, f"broker {b.port} lists brokers {got}, not {want}"
                time.sleep(0.2)

    # -- the faults ---------------------------------------------------------------------------------

    def inject(self, kind: str, role: str) -> Heal:
        if role in CONTROLLER_ROLES:
            return self._controller_fault(kind, role)
        return broker_fault(self, kind, role)

    def _controller_fault(self, kind: str, role: str) -> Heal:
        view = self.wait_active()
        victim = view.leader if role == "active-controller" else \
            next(i for i in self.quorum.controllers if i != view.leader and self.controller(i).is_running())
        c = self.controller(victim)
        began = time.monotonic()
        if kind == "kill":
            c.kill()
        else:
            assert c.stop(60) == 0
        if victim == view.leader:
            new = self.wait_active(after_epoch=view.epoch, not_leader=victim, timeout=max(60.0, self.failover_bound_s))
            took = time.monotonic() - began
            self.failovers.append(Failover(kind, victim, new.leader, took))
            print(f"  {kind} of active controller {victim} (epoch {view.epoch}): controller {new.leader} "
                  f"leads epoch {new.epoch} after {took:.2f}s", flush=True)
            assert took < self.failover_bound_s, \
                f"failover after {kind} of controller {victim} took {took:.2f}s (bound {self.failover_bound_s}s)"
        if kind == "bounce":
            c.start(timeout=60)

        def heal() -> None:
            if not c.is_running():
                c.start(timeout=60)
            self.wait_quorum_caught_up()
            self.wait_brokers_unfenced()
            self.wait_isr(set(self.ids))

        return heal

__all__ = ["CONTROLLER_MATRIX", "CONTROLLER_ROLES", "Failover", "KbrokerQuorumCluster", "QuorumView", "describe_quorum"]
