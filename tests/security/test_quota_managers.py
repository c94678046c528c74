"""The quota arithmetic on a fake clock: Kafka's Rate window, throttle times, the token bucket, the
8-level quota resolution, and the control manager's records replayed into the image."""

from __future__ import annotations

import pytest

from kbroker.cluster.quotas import (
    DEFAULT_ENTITY,
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ControllerMutationQuotaManager,
    QuotaManagers,
    QuotaWindow,
    Rate,
    ThrottlingQuotaExceeded,
)
from kbroker.controller.client_quota_control import (
    ClientQuotaAlteration,
    ClientQuotaControlManager,
    entity_string,
)
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.image_writer import image_records
from kbroker.protocol.errors import ErrorCode


class FakeClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


WINDOW = QuotaWindow(11, 1000)


def test_rate_measures_over_at_least_ten_windows() -> None:
    rate = Rate(WINDOW)
    rate.record(1000, 0)
    # One sample, 0 ms elapsed: the window is (11 - 1) full windows = 10 s.
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    # 15 s later the first sample is obsolete (11 s): reset, nothing left.
    assert rate.measure(15_000) == 0.0


def test_rate_window_grows_past_ten_seconds() -> None:
    rate = Rate(WINDOW)
    for t in range(0, 10_500, 500):  # 21 values of 100 over 10.5 s
        rate.record(100, t)
    # The oldest sample started at 0: 10.5 s elapsed (more than 10 full windows).
    assert rate.window_size_ms(10_500) == 10_500
    assert rate.measure(10_500) == pytest.approx(2100 / 10.5)


def test_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    clock = FakeClock(0)
    m = ClientQuotaManager("Produce", WINDOW, clock)
    m.set_quotas({(None, "c"): 1000.0})
    # The first window: 10 000 B at once is exactly 1000 B/s over the minimum 10 s window.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 10_000, 0) == 0
    # 15 000 B over 10 s = 1500 B/s; (1500 - 1000) / 1000 * 10 s = 5 s.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 5_000, 0) == 5000
    # Steady state: 900 B/s for 20 s, then a 5000 B burst.
    m = ClientQuotaManager("Produce", WINDOW, clock)
    m.set_quotas({(None, "c"): 1000.0})
    for t in range(0, 20_000, 100):
        assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 90, t) == 0
    throttle = m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 5000, 20_000)
    # 14 000 B in the last 10 s: 1400 B/s, 4 s to come back to 1000 B/s.
    assert throttle == 4000
    rate = m.sensors[("", "c")].rate
    assert rate is not None and rate.measure(20_000 + throttle) <= 1000 * 1.05
    # Another client id has its own sensor and no quota.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "other", 10**9, 0) == 0


def test_unrecord_takes_a_throttled_fetch_back() -> None:
    m = ClientQuotaManager("Fetch", WINDOW, FakeClock(0))
    m.set_quotas({(None, DEFAULT_ENTITY): 100.0})
    assert m.record_and_get_throttle_time_ms("u", "c", 2000, 0) > 0
    m.unrecord("u", "c", 2000, 0)
    assert m.record_and_get_throttle_time_ms("u", "c", 0, 0) == 0
    # The largest fetch that is not throttled for sure: 100 B/s * 10 windows of 1 s.
    assert m.max_value_in_quota_window("u", "c") == 1000.0


def test_request_quota_percentage_and_cap() -> None:
    m = ClientRequestQuotaManager(QuotaWindow(2, 1000), FakeClock(0))
    m.set_quotas({(None, "c"): 10.0})  # 10 % of one thread
    # 50 ms of handling in a 1 s window = 5 %.
    assert m.record_request_time_ns("u", "c", 50_000_000, 0) == 0
    # 5 s more: far above, throttled for at most one window (ClientRequestQuotaManager's bound).
    assert m.record_request_time_ns("u", "c", 5_000_000_000, 0) == 1000


QUOTA_LEVELS = [
    (("alice", "app"), 1.0),
    (("alice", DEFAULT_ENTITY), 2.0),
    (("alice", None), 3.0),
    ((DEFAULT_ENTITY, "app"), 4.0),
    ((DEFAULT_ENTITY, DEFAULT_ENTITY), 5.0),
    ((DEFAULT_ENTITY, None), 6.0),
    ((None, "app"), 7.0),
    ((None, DEFAULT_ENTITY), 8.0),
]


@pytest.mark.parametrize("level", range(len(QUOTA_LEVELS)))
def test_the_most_specific_of_the_eight_levels_applies(level: int) -> None:
    m = ClientQuotaManager("Produce", WINDOW, FakeClock())
    m.set_quotas(dict(QUOTA_LEVELS[level:]))
    assert m.quota("alice", "app") == QUOTA_LEVELS[level][1]


def test_metric_tags_share_a_user_quota_across_client_ids() -> None:
    m = ClientQuotaManager("Produce", WINDOW, FakeClock(0))
    m.set_quotas({("alice", None): 100.0, (None, "app"): 50.0})
    assert m.metric_tags("alice", "one") == ("alice", "")
    assert m.metric_tags("bob", "app") == ("", "app")
    m.record_and_get_throttle_time_ms("alice", "one", 1000, 0)
    # The second client id of alice records into the same sensor: already at 100 B/s.
    assert m.record_and_get_throttle_time_ms("alice", "two", 1000, 0) > 0
    # No quota at all for bob's other client: nothing is recorded.
    assert m.quota("bob", "other") is None


def test_controller_mutation_token_bucket_strict_and_permissive() -> None:
    clock = FakeClock(0)
    m = ControllerMutationQuotaManager(QuotaWindow(2, 1000), clock)
    m.set_quotas({(None, "c"): 1.0})  # 1 partition/s, burst 2
    strict = m.new_quota_for("u", "c", version=6, strict_since_version=6)
    strict.check()
    strict.record(5)  # 2 - 5 = -3 tokens
    with pytest.raises(ThrottlingQuotaExceeded) as e:
        strict.check()
    assert e.value.throttle_ms == 3000 and strict.throttle_time_ms == 3000
    clock.now = 4000  # refilled by 4 tokens (capped at the burst): 1
    strict.check()
    permissive = m.new_quota_for("u", "c", version=5, strict_since_version=6)
    permissive.record(3)  # 1 - 3 = -2
    assert permissive.throttle_time_ms == 2000
    unbounded = m.new_quota_for("u", "other", version=6, strict_since_version=6)
    unbounded.check()
    unbounded.record(100)
    assert unbounded.throttle_time_ms == 0


def _alter(mgr: ClientQuotaControlManager, image: MetadataImage,
           *alterations: ClientQuotaAlteration) -> tuple[MetadataImage, list[tuple[int, str | None]]]:
    result = mgr.alter_client_quotas(alterations)
    delta = MetadataDelta(image)
    for r in result.records:
        delta.replay(r)
    return delta.apply(), [(r.error_code, r.error_message) for r in result.response]


def test_control_manager_records_replay_into_the_image_and_the_managers() -> None:
    image = MetadataImage.EMPTY
    mgr = ClientQuotaControlManager(lambda: image.client_quotas)
    client = (("client-id", "x"),)
    image, results = _alter(mgr, image, ClientQuotaAlteration(client, (("producer_byte_rate", 1024.0),
                                                                        ("consumer_byte_rate", 2048.0))))
    assert results == [(0, None)]
    assert dict(image.client_quotas.quotas(client)) == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
    # Setting the same value writes nothing; removing a key that is not set writes nothing either.
    again = mgr.alter_client_quotas([ClientQuotaAlteration(client, (("producer_byte_rate", 1024.0),
                                                                     ("request_percentage", None)))])
    assert again.records == []
    managers = QuotaManagers(WINDOW, WINDOW, FakeClock())
    managers.update(image.client_quotas)
    assert managers.produce.quota("ANONYMOUS", "x") == 1024.0
    assert managers.fetch.quota("ANONYMOUS", "x") == 2048.0
    assert managers.request.quota("ANONYMOUS", "x") is None
    # A snapshot holds the quotas: writing the image and replaying it gives the same quotas.
    replayed = MetadataDelta(MetadataImage.EMPTY)
    for r in image_records(image):
        replayed.replay(r)
    assert replayed.apply().client_quotas == image.client_quotas
    image, results = _alter(mgr, image, ClientQuotaAlteration(client, (("producer_byte_rate", None),
                                                                        ("consumer_byte_rate", None))))
    assert results == [(0, None)] and image.client_quotas.is_empty()
    managers.update(image.client_quotas)
    assert not managers.produce.quotas_enabled


def test_control_manager_refusals() -> None:
    image = MetadataImage.EMPTY
    mgr = ClientQuotaControlManager(lambda: image.client_quotas)
    bad = ErrorCode.INVALID_REQUEST
    _, results = _alter(
        mgr, image,
        ClientQuotaAlteration((("client-id", "y"),), (("producer_byte_rate", 10.5),)),
        ClientQuotaAlteration((("ip", "127.0.0.1"), ("user", "u")), (("connection_creation_rate", 1.0),)),
        ClientQuotaAlteration((("client-id", "w"),), (("connection_creation_rate", 1.0),)),
        ClientQuotaAlteration((("client-id", "z"),), (("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0))),
    )
    assert results == [
        (bad, "producer_byte_rate cannot be a fractional value."),
        (bad, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        (bad, "Invalid configuration key connection_creation_rate"),
        (bad, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=z})"),
    ]
    # The same entity twice in one request: the second answers for it.
    _, results = _alter(mgr, image,
                        ClientQuotaAlteration((("client-id", "t"),), (("producer_byte_rate", 1.0),)),
                        ClientQuotaAlteration((("client-id", "t"),), (("consumer_byte_rate", 1.0),)))
    assert results == [(bad, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=t})")]
    assert entity_string((("user", "u"), ("client-id", None))) == "ClientQuotaEntity(entries={client-id=null, user=u})"
