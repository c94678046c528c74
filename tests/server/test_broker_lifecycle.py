"""BrokerLifecycle (kbroker/server/broker_lifecycle.py), sans-IO on a fake clock: what a broker sends the
controller and when, and how it reacts to the controller's answers (Kafka's BrokerLifecycleManager)."""

from __future__ import annotations

import uuid

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kbroker.protocol.messages.broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kbroker.server.broker_lifecycle import BrokerLifecycle, BrokerState, RegistrationInfo
from kbroker.server.settings import BrokerListener

DIR = uuid.UUID(int=7)
INCARNATION = uuid.UUID(int=42)


def lifecycle() -> BrokerLifecycle:
    info = RegistrationInfo(node_id=3, cluster_id="c1", incarnation_id=INCARNATION,
                            listeners=(BrokerListener("PLAINTEXT", "127.0.0.1", 9092, 0),), log_dirs=(DIR,),
                            rack="r1")
    return BrokerLifecycle(info, heartbeat_interval_ms=2000, retry_backoff_ms=100)


def registered(lc: BrokerLifecycle, now: int = 0, epoch: int = 17) -> None:
    req = lc.poll(now, 0)
    assert isinstance(req, BrokerRegistrationRequest)
    lc.on_registration_response(now, BrokerRegistrationResponse(error_code=0, broker_epoch=epoch))


def heartbeat_answer(fenced: bool, caught_up: bool = True, shut_down: bool = False,
                     error: ErrorCode = ErrorCode.NONE) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(error_code=int(error), is_caught_up=caught_up, is_fenced=fenced,
                                   should_shut_down=shut_down)


def test_registration_carries_listeners_features_incarnation_and_log_dirs() -> None:
    lc = lifecycle()
    req = lc.poll(0, 0)
    assert isinstance(req, BrokerRegistrationRequest)
    assert (req.broker_id, req.cluster_id, req.incarnation_id, req.rack) == (3, "c1", INCARNATION, "r1")
    assert [(lsn.name, lsn.host, lsn.port, lsn.security_protocol) for lsn in req.listeners] == [
        ("PLAINTEXT", "127.0.0.1", 9092, 0)]
    assert req.log_dirs == [DIR]
    assert req.is_migrating_zk_broker is False
    assert req.previous_broker_epoch == -1
    features = {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features}
    assert features["metadata.version"] == (7, 30)
    assert features["kraft.version"] == (0, 1)
    # Nothing else is sent while the registration is in flight.
    assert lc.poll(5000, 0) is None


def test_failed_registration_is_retried_after_the_backoff() -> None:
    lc = lifecycle()
    lc.poll(0, 0)
    lc.on_registration_response(10, BrokerRegistrationResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION)))
    assert lc.state == BrokerState.STARTING
    assert lc.last_error == ErrorCode.UNSUPPORTED_VERSION
    assert lc.poll(109, 0) is None
    assert isinstance(lc.poll(110, 0), BrokerRegistrationRequest)
    lc.on_registration_response(120, None)  # no answer at all: retried the same way
    assert lc.poll(219, 0) is None
    assert isinstance(lc.poll(220, 0), BrokerRegistrationRequest)


def test_fenced_until_the_controller_unfences_then_heartbeats_on_the_interval() -> None:
    lc = lifecycle()
    registered(lc, now=0, epoch=17)
    assert lc.state == BrokerState.RECOVERY
    hb = lc.poll(0, 12)  # the first heartbeat goes at once
    assert isinstance(hb, BrokerHeartbeatRequest)
    assert (hb.broker_id, hb.broker_epoch, hb.current_metadata_offset) == (3, 17, 12)
    assert hb.want_fence is True and hb.want_shut_down is False
    lc.on_heartbeat_response(5, heartbeat_answer(fenced=True, caught_up=False))
    assert lc.state == BrokerState.RECOVERY
    # The broker becomes ready: the next heartbeat goes now and asks to be unfenced.
    lc.set_ready_to_unfence(100)
    hb = lc.poll(100, 20)
    assert isinstance(hb, BrokerHeartbeatRequest) and hb.want_fence is False
    lc.on_heartbeat_response(110, heartbeat_answer(fenced=False))
    assert lc.state == BrokerState.RUNNING and not lc.is_fenced
    assert lc.poll(2109, 30) is None
    hb = lc.poll(2110, 30)
    assert isinstance(hb, BrokerHeartbeatRequest) and hb.current_metadata_offset == 30


def test_stale_broker_epoch_registers_again() -> None:
    lc = lifecycle()
    registered(lc, epoch=17)
    lc.set_ready_to_unfence(0)
    lc.poll(0, 1)
    lc.on_heartbeat_response(1, heartbeat_answer(fenced=False))
    hb = lc.poll(2001, 5)
    assert isinstance(hb, BrokerHeartbeatRequest)
    lc.on_heartbeat_response(2002, heartbeat_answer(fenced=True, error=ErrorCode.STALE_BROKER_EPOCH))
    assert lc.state == BrokerState.STARTING
    again = lc.poll(2002, 5)
    assert isinstance(again, BrokerRegistrationRequest)
    assert again.incarnation_id == INCARNATION  # the same process
    lc.on_registration_response(2003, BrokerRegistrationResponse(error_code=0, broker_epoch=40))
    hb = lc.poll(2003, 5)
    assert isinstance(hb, BrokerHeartbeatRequest) and hb.broker_epoch == 40
    assert lc.registrations == 2


def test_heartbeat_errors_and_lost_answers_retry_after_the_backoff() -> None:
    lc = lifecycle()
    registered(lc)
    lc.poll(0, 0)
    lc.on_heartbeat_response(10, None)
    assert lc.poll(109, 0) is None
    assert isinstance(lc.poll(110, 0), BrokerHeartbeatRequest)
    lc.on_heartbeat_response(120, heartbeat_answer(fenced=True, error=ErrorCode.NOT_CONTROLLER))
    assert lc.state == BrokerState.RECOVERY
    assert isinstance(lc.poll(220, 0), BrokerHeartbeatRequest)


def test_controlled_shutdown_asks_at_once_and_ends_when_the_controller_says_so() -> None:
    lc = lifecycle()
    registered(lc)
    lc.set_ready_to_unfence(0)
    lc.poll(0, 1)
    lc.on_heartbeat_response(1, heartbeat_answer(fenced=False))
    lc.begin_controlled_shutdown(500)
    assert lc.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    hb = lc.poll(500, 9)
    assert isinstance(hb, BrokerHeartbeatRequest) and hb.want_shut_down is True
    lc.on_heartbeat_response(510, heartbeat_answer(fenced=False, shut_down=False))
    # Still moving leadership away: the next heartbeat comes sooner than the interval.
    assert lc.poll(609, 9) is None
    hb = lc.poll(610, 9)
    assert isinstance(hb, BrokerHeartbeatRequest) and hb.want_shut_down
    lc.on_heartbeat_response(620, heartbeat_answer(fenced=True, shut_down=True))
    assert lc.state == BrokerState.SHUTTING_DOWN
    assert lc.poll(10_000, 9) is None


def test_controlled_shutdown_before_registration_has_nothing_to_hand_over() -> None:
    lc = lifecycle()
    lc.begin_controlled_shutdown(0)
    assert lc.state == BrokerState.SHUTTING_DOWN
    assert lc.poll(0, 0) is None


def test_heartbeats_report_failed_log_dirs() -> None:
    lc = lifecycle()
    registered(lc)
    hb = lc.poll(0, 3, [DIR])
    assert isinstance(hb, BrokerHeartbeatRequest)
    assert hb.offline_log_dirs == [DIR]
