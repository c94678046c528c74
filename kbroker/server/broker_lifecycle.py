"""`BrokerLifecycleManager`: a broker's registration and heartbeats with the active controller (Kafka's
`kafka.server.BrokerLifecycleManager`).

Two halves. `BrokerLifecycle` is the decision logic, sans-IO: a clock value and the controller's
answers in, the next request to send (BrokerRegistration or BrokerHeartbeat) and when, out; it is
unit-tested on a fake clock. `BrokerLifecycleManager` is its asyncio driver: it sends what the state
machine asks through the `ControllerChannel` and feeds the answers back.

The states are Kafka's `BrokerState`: STARTING (not registered) -> RECOVERY (registered, fenced,
catching up with the metadata log) -> RUNNING (the controller unfenced it) -> PENDING_CONTROLLED_SHUTDOWN
(heartbeats carry want_shut_down; the controller moves leadership away) -> SHUTTING_DOWN (the controller
said should_shut_down). The controller decides fencing: a heartbeat reports the broker's current
metadata offset and `want_fence` (true until the broker says it is ready, i.e. its image has caught up
and its publishers ran), and the controller unfences it once that offset has reached the broker's own
registration record.

- Registration: listeners (the advertised ones, with Kafka's security protocol ids), the features kbroker
  supports with their version ranges, a fresh incarnation id per process, the log dirs' `directory.id`s,
  the rack, `is_migrating_zk_broker` false, `previous_broker_epoch` (KIP-966: the epoch of a clean
  shutdown, else -1). A failed registration is retried after `controller.quorum.retry.backoff.ms`-style
  backoff (Kafka backs off exponentially up to a few seconds; here a fixed `retry_backoff_ms`).
- Heartbeat every `broker.heartbeat.interval.ms`; at once after registering and on a state change.
- STALE_BROKER_EPOCH on a heartbeat (the controller no longer knows this registration, e.g. it lost the
  session and a newer one replaced it), or a heartbeat answered with NOT_REGISTERED-like errors: register
  again, with a new broker epoch (the incarnation id stays: it is the same process).
- NOT_CONTROLLER or no answer: the driver rediscovers the controller and the request is retried.
- Heartbeats carry the `directory.id`s of log dirs that failed (KIP-858), so the controller moves
  leadership off the replicas in them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kbroker.protocol.messages.broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kbroker.server.settings import BrokerListener

log = logging.getLogger(__name__)

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63


class BrokerState(enum.IntEnum):
    """Kafka's `org.apache.kafka.metadata.BrokerState` values."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


@dataclass(frozen=True, slots=True)
class FeatureRange:
    name: str
    min_version: int
    max_version: int


# What a kbroker broker supports: metadata.version 3.3-IV3 (7, the KRaft floor) to 4.3-IV0 (30), the
# kraft.version of both static and dynamic quorums (an observer reads either), group.version 1 (KIP-848),
# and the levels Kafka 4.3's `kafka-storage format` finalizes by default for the features whose brokers'
# side kbroker does not implement yet (transaction.version, eligible.leader.replicas.version,
# share.version, streams.version): claimed so a default-formatted cluster accepts the registration;
# what kbroker does not implement is listed in docs/cluster.md.
SUPPORTED_FEATURES: tuple[FeatureRange, ...] = (
    FeatureRange("metadata.version", 7, 30),
    FeatureRange("kraft.version", 0, 1),
    FeatureRange("group.version", 0, 1),
    FeatureRange("transaction.version", 0, 2),
    FeatureRange("eligible.leader.replicas.version", 0, 1),
    FeatureRange("share.version", 0, 1),
    FeatureRange("streams.version", 0, 1),
)


@dataclass(frozen=True, slots=True)
class RegistrationInfo:
    """Everything a BrokerRegistration carries besides the epoch bookkeeping."""

    node_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerListener, ...]
    log_dirs: tuple[uuid.UUID, ...]
    rack: str | None = None
    features: tuple[FeatureRange, ...] = SUPPORTED_FEATURES
    previous_broker_epoch: int = -1


@dataclass
class BrokerLifecycle:
    """The decision logic, sans-IO. The driver calls `poll(now, metadata_offset)` whenever `next_send_ms`
    is reached (or a state change asks for an immediate send), sends the request it gets, and hands the
    answer (or None for no answer) to `on_registration_response` / `on_heartbeat_response`."""

    info: RegistrationInfo
    heartbeat_interval_ms: int = 2000
    retry_backoff_ms: int = 100
    state: BrokerState = BrokerState.STARTING
    broker_epoch: int = -1
    next_send_ms: int = 0
    in_flight: bool = False
    # Set by the broker once its image has caught up and its publishers ran (Kafka's setReadyToUnfence).
    ready_to_unfence: bool = False
    is_caught_up: bool = False  # the controller said so
    is_fenced: bool = True  # the controller's last word
    registrations: int = 0
    last_error: ErrorCode | int | None = field(default=None)

    # -- inputs from the broker ----------------------------------------------------------------------

    def set_ready_to_unfence(self, now_ms: int) -> None:
        if not self.ready_to_unfence:
            self.ready_to_unfence = True
            self.next_send_ms = min(self.next_send_ms, now_ms)

    def begin_controlled_shutdown(self, now_ms: int) -> None:
        """Ask the controller to move leadership away (want_shut_down on the next heartbeat, sent now)."""
        if self.state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return
        if self.state != BrokerState.RUNNING and self.state != BrokerState.RECOVERY:
            self.state = BrokerState.SHUTTING_DOWN  # never registered: nothing to hand over
            return
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self.next_send_ms = now_ms

    # -- what to send --------------------------------------------------------------------------------

    def poll(self, now_ms: int, metadata_offset: int, offline_log_dirs: Sequence[uuid.UUID] = ()
             ) -> BrokerRegistrationRequest | BrokerHeartbeatRequest | None:
        if self.in_flight or now_ms < self.next_send_ms or self.state in (BrokerState.SHUTTING_DOWN,
                                                                          BrokerState.NOT_RUNNING):
            return None
        self.in_flight = True
        if self.state == BrokerState.STARTING:
            i = self.info
            return BrokerRegistrationRequest(
                broker_id=i.node_id, cluster_id=i.cluster_id, incarnation_id=i.incarnation_id,
                listeners=[BrokerRegistrationRequest.Listener(name=lsn.name, host=lsn.host, port=lsn.port,
                                                              security_protocol=lsn.security_protocol)
                           for lsn in i.listeners],
                features=[BrokerRegistrationRequest.Feature(name=f.name, min_supported_version=f.min_version,
                                                            max_supported_version=f.max_version)
                          for f in i.features],
                rack=i.rack, is_migrating_zk_broker=False, log_dirs=list(i.log_dirs),
                previous_broker_epoch=i.previous_broker_epoch,
            )
        return BrokerHeartbeatRequest(
            broker_id=self.info.node_id, broker_epoch=self.broker_epoch,
            current_metadata_offset=max(metadata_offset, 0),
            want_fence=not self.ready_to_unfence,
            want_shut_down=self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN,
            # KIP-858: the controller moves leadership off replicas in a failed directory.
            offline_log_dirs=sorted(offline_log_dirs),
        )

    # -- answers -------------------------------------------------------------------------------------

    def on_registration_response(self, now_ms: int, resp: BrokerRegistrationResponse | None) -> None:
        self.in_flight = False
        if resp is None or resp.error_code != ErrorCode.NONE:
            self.last_error = None if resp is None else _code(resp.error_code)
            if resp is not None:
                log.warning("Broker registration failed: %s; retrying", self.last_error)
            self.next_send_ms = now_ms + self.retry_backoff_ms
            return
        self.broker_epoch = int(resp.broker_epoch)
        self.registrations += 1
        self.is_fenced = True
        self.state = BrokerState.RECOVERY
        self.next_send_ms = now_ms  # the first heartbeat at once
        log.info("Registered broker %d with the controller: broker epoch %d", self.info.node_id, self.broker_epoch)

    def on_heartbeat_response(self, now_ms: int, resp: BrokerHeartbeatResponse | None) -> None:
        self.in_flight = False
        if resp is None:
            self.next_send_ms = now_ms + self.retry_backoff_ms
            return
        code = _code(resp.error_code)
        if code != ErrorCode.NONE:
            self.last_error = code
            if code == ErrorCode.STALE_BROKER_EPOCH and self.state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
                log.warning("Heartbeat answered STALE_BROKER_EPOCH (epoch %d): registering again", self.broker_epoch)
                self.state = BrokerState.STARTING
                self.is_fenced = True
                self.next_send_ms = now_ms
            elif code == ErrorCode.STALE_BROKER_EPOCH:
                self.state = BrokerState.SHUTTING_DOWN  # the registration is gone: nothing left to hand over
            else:
                self.next_send_ms = now_ms + self.retry_backoff_ms
            return
        self.is_caught_up = bool(resp.is_caught_up)
        was_fenced, self.is_fenced = self.is_fenced, bool(resp.is_fenced)
        if self.state == BrokerState.RECOVERY and not self.is_fenced:
            self.state = BrokerState.RUNNING
            log.info("The controller unfenced broker %d (epoch %d)", self.info.node_id, self.broker_epoch)
        elif self.state == BrokerState.RUNNING and self.is_fenced and not was_fenced:
            # Fenced while running (missed heartbeats): heartbeats go on and the controller unfences it again.
            log.warning("The controller fenced broker %d (epoch %d)", self.info.node_id, self.broker_epoch)
        elif self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN and resp.should_shut_down:
            self.state = BrokerState.SHUTTING_DOWN
            log.info("The controller completed the controlled shutdown of broker %d", self.info.node_id)
            return
        pending = self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
        # While waiting for the controller to move leadership away, heartbeat sooner (Kafka sends the
        # next heartbeat at once in that state); otherwise on the interval.
        delay = min(self.heartbeat_interval_ms, 100) if pending else self.heartbeat_interval_ms
        self.next_send_ms = now_ms + delay


def _code(value: int) -> ErrorCode | int:
    try:
        return ErrorCode(value)
    except ValueError:
        return value


class ControllerSender(Protocol):
    """What the driver needs of the controller channel (`ControllerChannel` is one)."""

    async def send_registration(self, req: BrokerRegistrationRequest) -> BrokerRegistrationResponse: ...

    async def send_heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse: ...


class BrokerLifecycleManager:
    """The asyncio driver of `BrokerLifecycle`."""

    def __init__(self, lifecycle: BrokerLifecycle, sender: ControllerSender, metadata_offset: Callable[[], int],
                 time_ms: Callable[[], int],
                 offline_log_dirs: Callable[[], Sequence[uuid.UUID]] = lambda: ()) -> None:
        self.lifecycle = lifecycle
        self.sender = sender
        self.metadata_offset = metadata_offset
        self.offline_log_dirs = offline_log_dirs
        self.time_ms = time_ms
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def state(self) -> BrokerState:
        return self.lifecycle.state

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-lifecycle")

    def set_ready_to_unfence(self) -> None:
        self.lifecycle.set_ready_to_unfence(self.time_ms())
        self._wake.set()

    async def wait_for(self, predicate: Callable[[BrokerLifecycle], bool], timeout_s: float) -> None:
        async def wait() -> None:
            while not predicate(self.lifecycle):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout_s)

    async def wait_unfenced(self, timeout_s: float) -> None:
        await self.wait_for(lambda lc: lc.state == BrokerState.RUNNING, timeout_s)

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Begin a controlled shutdown and wait for the controller to complete it; False on timeout."""
        self.lifecycle.begin_controlled_shutdown(self.time_ms())
        self._wake.set()
        try:
            await self.wait_for(lambda lc: lc.state == BrokerState.SHUTTING_DOWN, timeout_s)
        except TimeoutError:
            log.warning("The controller did not complete the controlled shutdown within %.1fs", timeout_s)
            return False
        return True

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.lifecycle.state = BrokerState.NOT_RUNNING

    async def _run(self) -> None:
        lc = self.lifecycle
        while lc.state not in (BrokerState.SHUTTING_DOWN, BrokerState.NOT_RUNNING):
            now = self.time_ms()
            req = lc.poll(now, self.metadata_offset(), self.offline_log_dirs())
            if req is None:
                self._wake.clear()
                delay = max(0.0, (lc.next_send_ms - now) / 1000)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            if isinstance(req, BrokerRegistrationRequest):
                reg: BrokerRegistrationResponse | None
                try:
                    reg = await self.sender.send_registration(req)
                except (ConnectionError, TimeoutError, OSError) as exc:
                    log.debug("BrokerRegistration got no answer: %s", exc)
                    reg = None
                lc.on_registration_response(self.time_ms(), reg)
            else:
                hb: BrokerHeartbeatResponse | None
                try:
                    hb = await self.sender.send_heartbeat(req)
                except (ConnectionError, TimeoutError, OSError) as exc:
                    log.debug("BrokerHeartbeat got no answer: %s", exc)
                    hb = None
                lc.on_heartbeat_response(self.time_ms(), hb)
            self._changed.set()
        self._changed.set()


def listeners_for_registration(listeners: Sequence[tuple[str, str, int, str]]) -> tuple[BrokerListener, ...]:
    """(name, host, port, security protocol name) -> BrokerListener with Kafka's SecurityProtocol id."""
    ids = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
    return tuple(BrokerListener(n, h, p, ids.get(sp, 0)) for n, h, p, sp in listeners)
