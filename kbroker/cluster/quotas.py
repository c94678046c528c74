"""Client quotas, enforced as Kafka enforces them: Kafka's `ClientQuotaManager` (Produce and Fetch byte
rates), `ClientRequestQuotaManager` (request_percentage), `ControllerMutationQuotaManager`
(controller_mutation_rate) and `ClientQuotaMetadataManager` (the image -> the managers' quotas).

Sans-IO: values and a clock (ms) in, throttle times out; the network layer mutes the connection.

The arithmetic is Kafka's metrics library's:
- `Rate` is a windowed sum over `quota.window.num` samples of `quota.window.size.seconds` each
  (`SampledStat`: a sample is complete after one window; the next one reuses the oldest slot; samples
  older than num*window are reset), divided by the window size of `Rate.windowSize`: the time since
  the oldest sample, but never fewer than num-1 full windows (a first burst is measured over 10 s, not
  over the milliseconds it took).
- A value is recorded, then checked: above the quota bound (`Quota.upperBound`) the throttle time is
  `(rate - bound) / bound * windowSize` ms (`QuotaUtils.throttleTime`): how long the client must stay
  silent for the rate to come back to the bound. The request quota caps it at one window
  (`boundedThrottleTime`).
- `controller_mutation_rate` is a `TokenBucket`: `burst = quota * num * window seconds` tokens, refilled
  at `quota` per second; a mutation takes one token per partition created or deleted; below zero the
  throttle time is `-tokens / quota * 1000` ms. Strict mode (CreateTopics v6+, CreatePartitions v3+,
  DeleteTopics v5+) refuses a topic with THROTTLING_QUOTA_EXCEEDED while the bucket is negative;
  older versions are permissive (the mutation happens, the response carries the throttle time).

Quota resolution (`DefaultQuotaCallback`), most specific first: /users/<user>/clients/<client-id>,
/users/<user>/clients/<default>, /users/<user>, /users/<default>/clients/<client-id>,
/users/<default>/clients/<default>, /users/<default>, /clients/<client-id>, /clients/<default>.
The sensor a client records into is keyed by the metric tags of the level that applies
(`quotaMetricTags`): a user quota is shared by every client id of that user, a client-id quota by
every user of that client id. No quota at any level: no recording at all (`quotasEnabled`).

Imports only the metadata image types (and the clock): must not import asyncio or net/.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import ClientQuotasImage, MetadataImage

USER, CLIENT_ID = "user", "client-id"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED, USER_QUOTA_ENABLED, USER_CLIENT_ID_QUOTA_ENABLED = 0, 1, 2, 4
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


class _Default:
    """The `<default>` user or client id of a quota entity (a name can be the string "<default>")."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT_ENTITY = _Default()
# One side of a quota entity: None (the level has no such part), DEFAULT_ENTITY, or a name.
EntityPart = str | _Default | None
QuotaEntity = tuple[EntityPart, EntityPart]  # (user, client-id)


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """`quota.window.num` samples of `quota.window.size.seconds` (Kafka's defaults: 11 x 1 s)."""

    num_samples: int = 11
    window_ms: int = 1000


@dataclass(frozen=True, slots=True)
class QuotaViolation:
    """Kafka's QuotaViolationException: the measured value, the bound, and the window it was measured over."""

    value: float
    bound: float
    window_ms: int


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.value = 0.0


class Rate:
    """Kafka's `Rate` over a `WindowedSum`: per second, over the quota window."""

    __slots__ = ("window", "samples", "current")

    def __init__(self, window: QuotaWindow) -> None:
        self.window = window
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self.samples:
            self.samples.append(_Sample(now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.window.window_ms:
            self.current = (self.current + 1) % self.window.num_samples
            if self.current >= len(self.samples):
                sample = _Sample(now_ms)
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample.start_ms, sample.value = now_ms, 0.0
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire = self.window.num_samples * self.window.window_ms
        for s in self.samples:
            if now_ms - s.start_ms >= expire:
                s.start_ms, s.value = now_ms, 0.0

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        if not self.samples:
            self.samples.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start_ms for s in self.samples)
        full = elapsed // self.window.window_ms
        minimum = self.window.num_samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        self._purge(now_ms)
        total = sum(s.value for s in self.samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)


class TokenBucket:
    """Kafka's `TokenBucket`: `burst` tokens at most, refilled at `quota` per second; starts full."""

    __slots__ = ("window", "tokens", "last_update_ms")

    def __init__(self, window: QuotaWindow) -> None:
        self.window = window
        self.tokens: float | None = None
        self.last_update_ms = 0

    def _burst(self, quota: float) -> float:
        return self.window.num_samples * (self.window.window_ms / 1000.0) * quota

    def _refill(self, quota: float, now_ms: int) -> float:
        burst = self._burst(quota)
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self.last_update_ms) / 1000.0)
        self.last_update_ms = now_ms
        return burst

    def record(self, quota: float, value: float, now_ms: int) -> None:
        burst = self._refill(quota, now_ms)
        assert self.tokens is not None
        self.tokens = min(burst, self.tokens - value)

    def measure(self, quota: float, now_ms: int) -> float:
        self._refill(quota, now_ms)
        assert self.tokens is not None
        return self.tokens


def throttle_time_ms(v: QuotaViolation) -> int:
    """Kafka's `QuotaUtils.throttleTime`: time for the rate to come back to the bound."""
    return round((v.value - v.bound) / v.bound * v.window_ms)


class ClientSensors:
    """The quota sensor (a Rate or a TokenBucket) and the throttle-time average of one set of metric tags."""

    __slots__ = ("tags", "rate", "bucket", "throttle_time_total", "throttle_count", "last_record_ms")

    def __init__(self, tags: tuple[str, str], window: QuotaWindow, token_bucket: bool) -> None:
        self.tags = tags
        self.rate = None if token_bucket else Rate(window)
        self.bucket = TokenBucket(window) if token_bucket else None
        self.throttle_time_total = 0.0
        self.throttle_count = 0
        self.last_record_ms = 0

    @property
    def throttle_time_avg(self) -> float:
        """Kafka's `throttle-time` (Avg; 0 before any throttling)."""
        return self.throttle_time_total / self.throttle_count if self.throttle_count else 0.0


class ClientQuotaManager:
    """One quota type ("Produce", "Fetch", "Request", "ControllerMutation") for every client."""

    def __init__(self, quota_type: str, window: QuotaWindow, clock: Callable[[], int]) -> None:
        self.quota_type = quota_type
        self.window = window
        self.clock = clock
        self.overridden: dict[QuotaEntity, float] = {}
        self.quota_types_enabled = NO_QUOTAS
        self.sensors: dict[tuple[str, str], ClientSensors] = {}
        self._next_purge_ms = 0

    # -- configuration (from the metadata image) -------------------------------------------------------

    def set_quotas(self, quotas: Mapping[QuotaEntity, float]) -> None:
        """Replace every override (the image's quotas of this type)."""
        self.overridden = dict(quotas)
        enabled = NO_QUOTAS
        for user, client in self.overridden:
            if user is not None and client is not None:
                enabled |= USER_CLIENT_ID_QUOTA_ENABLED
            elif user is not None:
                enabled |= USER_QUOTA_ENABLED
            elif client is not None:
                enabled |= CLIENT_ID_QUOTA_ENABLED
        self.quota_types_enabled = enabled

    @property
    def quotas_enabled(self) -> bool:
        return self.quota_types_enabled != NO_QUOTAS

    # -- resolution ------------------------------------------------------------------------------------

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Kafka's `quotaMetricTags`: the (user, client-id) tags of the sensor this client records into."""
        enabled = self.quota_types_enabled
        if enabled in (NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED):
            return "", client_id
        if enabled == USER_QUOTA_ENABLED:
            return user, ""
        if enabled == USER_CLIENT_ID_QUOTA_ENABLED:
            return user, client_id
        o = self.overridden
        if (user, client_id) in o or (user, DEFAULT_ENTITY) in o:
            return user, client_id
        if (user, None) in o:
            return user, ""
        if (DEFAULT_ENTITY, client_id) in o or (DEFAULT_ENTITY, DEFAULT_ENTITY) in o:
            return user, client_id
        if (DEFAULT_ENTITY, None) in o:
            return user, ""
        return "", client_id

    def quota_limit(self, tags: tuple[str, str]) -> float | None:
        """Kafka's `DefaultQuotaCallback.quotaLimit`: the bound for a sensor's tags (None: unlimited)."""
        user, client_id = tags
        o = self.overridden
        if user and client_id:
            for key in ((user, client_id), (user, DEFAULT_ENTITY), (DEFAULT_ENTITY, client_id),
                        (DEFAULT_ENTITY, DEFAULT_ENTITY)):
                if key in o:
                    return o[key]
            return None
        if user:
            return o.get((user, None), o.get((DEFAULT_ENTITY, None)))
        if client_id:
            return o.get((None, client_id), o.get((None, DEFAULT_ENTITY)))
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        return self.quota_limit(self.metric_tags(user, client_id))

    def _sensors(self, user: str, client_id: str, now_ms: int) -> ClientSensors:
        tags = self.metric_tags(user, client_id)
        sensors = self.sensors.get(tags)
        if sensors is None:
            sensors = self.sensors[tags] = ClientSensors(tags, self.window, self.quota_type == "ControllerMutation")
        sensors.last_record_ms = now_ms
        if now_ms >= self._next_purge_ms:
            # Kafka's SensorAccess expires a client's sensors after an hour without a recording.
            self._next_purge_ms = now_ms + 60_000
            for t in [t for t, s in self.sensors.items() if now_ms - s.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS]:
                del self.sensors[t]
        return sensors

    # -- recording -------------------------------------------------------------------------------------

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float,
                                        now_ms: int | None = None) -> int:
        """Record `value` (bytes, or request-handling percentage) and the throttle time it earns."""
        if not self.quotas_enabled:
            return 0
        now = self.clock() if now_ms is None else now_ms
        sensors = self._sensors(user, client_id, now)
        assert sensors.rate is not None
        sensors.rate.record(value, now)
        bound = self.quota_limit(sensors.tags)
        if bound is None:
            return 0
        measured = sensors.rate.measure(now)
        if measured <= bound:
            return 0
        return self._throttle_time(QuotaViolation(measured, bound, sensors.rate.window_size_ms(now)))

    def _throttle_time(self, v: QuotaViolation) -> int:
        return throttle_time_ms(v)

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        if not self.quotas_enabled:
            return
        now = self.clock() if now_ms is None else now_ms
        sensors = self._sensors(user, client_id, now)
        assert sensors.rate is not None
        sensors.rate.record(value, now)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """A throttled fetch answers with no data: take its bytes back (Kafka's `unrecordQuotaSensor`)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most a single request may take without being throttled for sure: a fetch's size cap."""
        if not self.quotas_enabled:
            return math.inf
        bound = self.quota(user, client_id)
        if bound is None:
            return math.inf
        return bound * (self.window.num_samples - 1) * self.window.window_ms / 1000.0

    def throttle(self, user: str, client_id: str, throttle_ms: int) -> None:
        """Record a throttle time into the client's `throttle-time` sensor (the network layer mutes)."""
        if throttle_ms > 0:
            sensors = self._sensors(user, client_id, self.clock())
            sensors.throttle_time_total += throttle_ms
            sensors.throttle_count += 1


class ClientRequestQuotaManager(ClientQuotaManager):
    """`request_percentage`: the share of one request handler's time (here: of the event loop's) a client
    may use, recorded per request; the throttle time is capped at one quota window."""

    def __init__(self, window: QuotaWindow, clock: Callable[[], int]) -> None:
        super().__init__("Request", window, clock)

    def record_request_time_ns(self, user: str, client_id: str, time_ns: int, now_ms: int | None = None) -> int:
        return self.record_and_get_throttle_time_ms(user, client_id, time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)

    def _throttle_time(self, v: QuotaViolation) -> int:
        return min(throttle_time_ms(v), self.window.window_ms)


class ThrottlingQuotaExceeded(Exception):
    """Kafka's ThrottlingQuotaExceededException: a strict controller mutation quota is exhausted."""

    def __init__(self, throttle_ms: int) -> None:
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


class ControllerMutationQuota:
    """One request's view of its client's mutation quota (Kafka's Strict/Permissive/Unbounded
    ControllerMutationQuota). Per topic: `check()` before the mutation (strict: raise
    ThrottlingQuotaExceeded while the bucket is negative), `record(partitions)` once it succeeded
    (permissive: the throttle time it earns); `throttle_time_ms` goes into the response."""

    def __init__(self, manager: ControllerMutationQuotaManager | None, user: str, client_id: str, strict: bool) -> None:
        self.manager = manager
        self.user = user
        self.client_id = client_id
        self.strict = strict
        self.throttle_time_ms = 0

    def _bucket(self) -> tuple[TokenBucket, float, int] | None:
        m = self.manager
        if m is None:
            return None
        now = m.clock()
        sensors = m._sensors(self.user, self.client_id, now)
        bound = m.quota_limit(sensors.tags)
        if sensors.bucket is None or bound is None:
            return None
        return sensors.bucket, bound, now

    def check(self) -> None:
        if not self.strict:
            return
        found = self._bucket()
        if found is None:
            return
        bucket, bound, now = found
        tokens = bucket.measure(bound, now)
        if tokens < 0:
            self.throttle_time_ms = round(-tokens / bound * 1000)
            raise ThrottlingQuotaExceeded(self.throttle_time_ms)

    def record(self, permits: float) -> None:
        found = self._bucket()
        if found is None:
            return
        bucket, bound, now = found
        bucket.record(bound, permits, now)
        if not self.strict:
            tokens = bucket.measure(bound, now)
            if tokens < 0:
                self.throttle_time_ms = max(self.throttle_time_ms, round(-tokens / bound * 1000))


class ControllerMutationQuotaManager(ClientQuotaManager):
    def __init__(self, window: QuotaWindow, clock: Callable[[], int]) -> None:
        super().__init__("ControllerMutation", window, clock)

    def new_quota_for(self, user: str, client_id: str, version: int, strict_since_version: int) -> ControllerMutationQuota:
        if not self.quotas_enabled:
            return ControllerMutationQuota(None, user, client_id, False)
        return ControllerMutationQuota(self, user, client_id, version >= strict_since_version)


def _entity_part(name: str | None) -> EntityPart:
    return DEFAULT_ENTITY if name is None else name


def quotas_of(image: ClientQuotasImage, key: str) -> dict[QuotaEntity, float]:
    """The user / client-id quotas of one key in the image (ip entities are connection quotas)."""
    out: dict[QuotaEntity, float] = {}
    for entity, quotas in image.entities.items():
        value = quotas.get(key)
        if value is None:
            continue
        parts: dict[str, str | None] = dict(entity)
        if not parts or set(parts) - {USER, CLIENT_ID}:
            continue
        user = _entity_part(parts[USER]) if USER in parts else None
        client = _entity_part(parts[CLIENT_ID]) if CLIENT_ID in parts else None
        out[(user, client)] = value
    return out


class QuotaManagers:
    """Kafka's `QuotaFactory.QuotaManagers` (client quotas) and, as a metadata publisher, its
    `ClientQuotaMetadataManager`: each new image's client quotas become the managers' overrides."""

    def __init__(self, window: QuotaWindow, controller_window: QuotaWindow, clock: Callable[[], int]) -> None:
        self.produce = ClientQuotaManager("Produce", window, clock)
        self.fetch = ClientQuotaManager("Fetch", window, clock)
        self.request = ClientRequestQuotaManager(window, clock)
        self.controller_mutation = ControllerMutationQuotaManager(controller_window, clock)
        self._image: ClientQuotasImage | None = None

    @property
    def name(self) -> str:
        return "ClientQuotaMetadataManager"

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: object) -> None:
        self.update(new_image.client_quotas)

    def update(self, image: ClientQuotasImage) -> None:
        if image is self._image:
            return
        self._image = image
        self.produce.set_quotas(quotas_of(image, PRODUCER_BYTE_RATE))
        self.fetch.set_quotas(quotas_of(image, CONSUMER_BYTE_RATE))
        self.request.set_quotas(quotas_of(image, REQUEST_PERCENTAGE))
        self.controller_mutation.set_quotas(quotas_of(image, CONTROLLER_MUTATION_RATE))

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return (self.produce, self.fetch, self.request, self.controller_mutation)

