"""One partition's next registration as a `PartitionChangeRecord`: Kafka's `PartitionChangeBuilder`.

Every change of leader, ISR or replicas on the controller goes through here: a broker fenced,
unfenced, unregistered or shutting down; AlterPartition from a leader; ElectLeaders; preferred-leader
balancing; reassignment. The caller sets targets (ISR, replicas, adding/removing, election kind,
leader recovery state); `build()` returns the record, or None when nothing would change.

Kafka 4.3's rules, kept exactly:
- Leader election (ONLINE): keep the current leader while it is in the target ISR and acceptable
  (unfenced, not shutting down, its directory online); else the first replica, in assignment order,
  that is in the target ISR and acceptable; else, with UNCLEAN election
  (`unclean.leader.election.enable`), the first acceptable replica even outside the ISR, which then
  becomes the whole ISR with leader recovery state RECOVERING (KIP-704); else NO_LEADER (-1).
  PREFERRED election tries the first replica first, then keeps the current leader, then the others.
- The record's leader is -2 ("no change") unless the elected leader differs; a leader change bumps
  the leader epoch (the image's merge does that). The ISR is written only when it changes, and never
  emptied without ELR: a fenced last ISR member stays in the ISR of a leaderless partition.
- An ISR shrink alone bumps only the partition epoch (metadata.version >= 3.6-IV0 no longer needs
  the KAFKA-15021 leader epoch bump). A replica set that loses members bumps the leader epoch
  (leader re-set to itself), so followers of the old assignment are fenced.
- A reassignment completes when every target replica is in the ISR: the removing replicas leave the
  replicas and the ISR, adding/removing are cleared (Kafka's PartitionReassignmentReplicas).
- Directories (KIP-858) are written when the replica set changes: each replica keeps its directory,
  a new one gets the default directory of its broker.

Eligible leader replicas (KIP-966), when `eligible_leader_replicas_enabled` (Kafka: the
`eligible.leader.replicas.version` feature finalized at >= 1, which Kafka 4.3's `kafka-storage format`
does by default), exactly as Kafka 4.3.1's builder:
- While the target ISR is at least min ISR, ELR and last-known ELR are empty. Below it, ELR = (the
  current ISR + the current ELR) minus the target ISR minus the replicas that shut down uncleanly;
  last-known ELR = those candidates (plus the last-known ELR) that are neither in the ISR nor the ELR.
  With ELR the ISR may become empty (the last member fenced), instead of keeping a fenced member.
- Election: a replica is a valid leader if it is in the target ISR, or, with an empty ISR, in the ELR;
  elected from the ELR it becomes the whole ISR and leaves the ELR. With ISR and ELR both empty and a
  single "last known leader" stored in last-known ELR (`use_last_known_leader_in_balanced_recovery`,
  Kafka's default true), that replica is elected as an unclean election (KIP-966's balanced recovery).
- An unclean election (or ELR off) clears ELR and last-known ELR. With the last-known-leader mode the
  last-known ELR holds only the last leader: set when the partition loses its leader (if nothing is
  remembered yet), cleared when a leader is elected.
The quorum controller passes the feature flag and the topic's effective min ISR on every change
(`ReplicationControlManager`); the builder is checked against Kafka's own with the feature on and off
(tests/controller/test_partition_change_elr_vs_kafka.py, tests/controller/test_elr_controller.py).

Pure; imports metadata/ and protocol/ only.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from kbroker.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kbroker.protocol.metadata_records import PartitionChangeRecord


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


def complete_reassignment(
    removing: Sequence[int], adding: Sequence[int], replicas: Sequence[int], target_isr: Sequence[int]
) -> tuple[list[int], list[int]] | None:
    """(replicas, isr) once an ongoing reassignment can complete, else None."""
    if not removing and not adding:
        return None
    new_isr = list(target_isr)
    new_replicas = list(replicas)
    if removing:
        new_isr = [r for r in target_isr if r not in removing]
        if not new_isr:
            return None
        new_replicas = [r for r in replicas if r not in removing]
        if not new_replicas:
            return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


class PartitionChangeBuilder:
    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        default_dir: Callable[[int], uuid.UUID] | None = None,
        *,
        min_isr: int = 1,
        eligible_leader_replicas_enabled: bool = False,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.default_dir = default_dir or (lambda _broker: DirectoryId.UNASSIGNED)
        self.target_isr = list(partition.isr)
        self.target_replicas = list(partition.replicas)
        self.target_removing = list(partition.removing_replicas)
        self.target_adding = list(partition.adding_replicas)
        self.target_leader_recovery_state = partition.leader_recovery_state
        self.election = Election.ONLINE
        self.target_directories = dict(zip(partition.replicas, partition.directories, strict=False))
        self.min_isr = min_isr
        self.eligible_leader_replicas_enabled = eligible_leader_replicas_enabled
        self.use_last_known_leader_in_balanced_recovery = True
        self.target_elr = list(partition.elr)
        self.target_last_known_elr = list(partition.last_known_elr)
        self.unclean_shutdown_replicas: list[int] | None = None

    # -- targets -----------------------------------------------------------------------------------

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = list(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self.target_removing = list(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self.target_adding = list(adding)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_target_leader_recovery_state(self, state: LeaderRecoveryState) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def set_unclean_shutdown_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        """Replicas whose broker restarted after an unclean shutdown: never (again) in the ELR."""
        self.unclean_shutdown_replicas = list(replicas)
        return self

    def set_eligible_leader_replicas_enabled(self, enabled: bool) -> PartitionChangeBuilder:
        self.eligible_leader_replicas_enabled = enabled
        return self

    def set_use_last_known_leader_in_balanced_recovery(self, use: bool) -> PartitionChangeBuilder:
        self.use_last_known_leader_in_balanced_recovery = use
        return self

    # -- election ----------------------------------------------------------------------------------

    def _is_valid_new_leader(self, replica: int) -> bool:
        # In the ISR, or in the ELR when the ISR is empty (KIP-966).
        in_target = replica in self.target_isr or (not self.target_isr and replica in self.target_elr)
        return in_target and self.is_acceptable_leader(replica)

    def _can_elect_last_known_leader(self) -> bool:
        """KIP-966 balanced recovery: ISR and ELR empty, the last leader kept alone in last-known ELR
        and acceptable now; the election counts as unclean."""
        if not self.eligible_leader_replicas_enabled or not self.use_last_known_leader_in_balanced_recovery:
            return False
        if self.target_elr or self.target_isr:
            return False
        last = self.partition.last_known_elr
        return len(last) == 1 and self.is_acceptable_leader(last[0])

    def elect_leader(self) -> tuple[int, bool]:
        """(new leader, unclean?) under the current targets."""
        if self.election is Election.PREFERRED:
            preferred = self.target_replicas[0]
            if self._is_valid_new_leader(preferred):
                return preferred, False
            if self._is_valid_new_leader(self.partition.leader):
                return self.partition.leader, False
            for r in self.target_replicas[1:]:
                if self._is_valid_new_leader(r):
                    return r, False
            if self._can_elect_last_known_leader():
                return self.partition.last_known_elr[0], True
            return NO_LEADER, False
        if self._is_valid_new_leader(self.partition.leader):
            return self.partition.leader, False
        for r in self.target_replicas:
            if self._is_valid_new_leader(r):
                return r, False
        if self._can_elect_last_known_leader():
            return self.partition.last_known_elr[0], True
        if self.election is Election.UNCLEAN:
            for r in self.target_replicas:
                if self.is_acceptable_leader(r):
                    return r, True
        return NO_LEADER, False

    # -- build -------------------------------------------------------------------------------------

    def build(self) -> PartitionChangeRecord | None:
        p = self.partition
        record = PartitionChangeRecord(topic_id=self.topic_id, partition_id=self.partition_id)
        completed = complete_reassignment(self.target_removing, self.target_adding, self.target_replicas,
                                          self.target_isr)
        if completed is not None:
            self.target_replicas, self.target_isr = completed
            self.target_removing, self.target_adding = [], []

        self._maybe_populate_target_elr()

        leader, unclean = self.elect_leader()
        if leader != p.leader:
            if leader in self.target_elr:
                # Elected from the ELR: it becomes the ISR and leaves the ELR.
                self.target_isr = [leader]
                self.target_elr = [r for r in self.target_elr if r != leader]
            record.leader = leader
            if unclean:
                # Data may be lost: the new leader is the whole ISR until it has recovered (KIP-704).
                record.isr = [leader]
                if p.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                    record.leader_recovery_state = int(LeaderRecoveryState.RECOVERING)

        # Replicas that leave the assignment: bump the leader epoch (Kafka's
        # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
        if record.leader == NO_LEADER_CHANGE and not set(p.replicas) <= set(self.target_replicas):
            record.leader = p.leader

        self._maybe_update_record_elr(record)

        # With ELR the ISR may become empty; without, it never does.
        if (record.isr is None and (self.target_isr or self.eligible_leader_replicas_enabled)
                and self.target_isr != list(p.isr)):
            record.isr = list(self.target_isr)

        self._maybe_update_last_known_leader(record)

        if self.target_replicas:
            directories = [self.target_directories[r] if r in self.target_directories else self.default_dir(r)
                           for r in self.target_replicas]
            if directories != list(p.directories):
                record.directories = directories
            if self.target_replicas != list(p.replicas):
                record.replicas = list(self.target_replicas)
        if self.target_removing != list(p.removing_replicas):
            record.removing_replicas = list(self.target_removing)
        if self.target_adding != list(p.adding_replicas):
            record.adding_replicas = list(self.target_adding)
        if self.target_leader_recovery_state != p.leader_recovery_state:
            record.leader_recovery_state = int(self.target_leader_recovery_state)

        if _is_no_op(record):
            return None
        return record


    # -- eligible leader replicas (KIP-966) ----------------------------------------------------------

    def _maybe_populate_target_elr(self) -> None:
        """Kafka's `maybePopulateTargetElr`."""
        if not self.eligible_leader_replicas_enabled:
            return
        if len(self.target_isr) >= self.min_isr:
            self.target_elr, self.target_last_known_elr = [], []
            return
        target_isr = set(self.target_isr)
        unclean = set(self.unclean_shutdown_replicas or ())
        candidates = set(self.target_elr) | set(self.partition.isr)
        # Kafka collects these from a HashSet of small Integers: ascending order.
        self.target_elr = sorted(r for r in candidates if r not in target_isr and r not in unclean)
        candidates |= set(self.target_last_known_elr)
        self.target_last_known_elr = sorted(r for r in candidates if r not in target_isr and r not in self.target_elr)

    def _maybe_update_record_elr(self, record: PartitionChangeRecord) -> None:
        """Kafka's `maybeUpdateRecordElr`."""
        p = self.partition
        clean_election = record.isr is None
        if not clean_election or not self.eligible_leader_replicas_enabled:
            self.target_elr, self.target_last_known_elr = [], []
        if self.target_elr != list(p.elr):
            record.eligible_leader_replicas = list(self.target_elr)
        if self.use_last_known_leader_in_balanced_recovery and len(p.last_known_elr) == 1 and (
                record.leader == NO_LEADER or (record.leader == NO_LEADER_CHANGE and p.leader == NO_LEADER)):
            # The last known leader stays while the partition has no leader.
            self.target_last_known_elr = list(p.last_known_elr)
        if self.use_last_known_leader_in_balanced_recovery:
            return  # last-known ELR holds the last leader: `_maybe_update_last_known_leader`
        if self.target_last_known_elr != list(p.last_known_elr):
            record.last_known_elr = list(self.target_last_known_elr)

    def _maybe_update_last_known_leader(self, record: PartitionChangeRecord) -> None:
        """Kafka 4.3.1's `maybeUpdateLastKnownLeader`: remember the leader when the partition loses it
        (and nothing is remembered yet); forget it when a new leader is elected."""
        p = self.partition
        if not self.use_last_known_leader_in_balanced_recovery or not self.eligible_leader_replicas_enabled:
            return
        if record.leader == NO_LEADER and not p.last_known_elr:
            record.last_known_elr = [p.leader]
        elif record.leader >= 0 and p.last_known_elr:
            record.last_known_elr = []


def _is_no_op(record: PartitionChangeRecord) -> bool:
    return (
        record.isr is None
        and record.leader == NO_LEADER_CHANGE
        and record.replicas is None
        and record.removing_replicas is None
        and record.adding_replicas is None
        and record.leader_recovery_state == -1
        and record.directories is None
        and record.eligible_leader_replicas is None
        and record.last_known_elr is None
    )
