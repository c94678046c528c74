"""Connection creation rates (KIP-612): the rate part of Kafka's `ConnectionQuotas`, sans-IO.

Three bounds, Kafka's keys:
- `max.connection.creation.rate`: new connections per second on the broker, over every listener but
  the inter-broker one;
- `listener.name.<l>.max.connection.creation.rate`: per listener (the inter-broker one included);
- the `connection_creation_rate` client quota of an `ip` entity (or the default ip), from the
  metadata image (`kafka-configs --entity-type ips`).

Each accepted connection is recorded in the listener's and the broker's `Rate` (quota.window.num x
quota.window.size.seconds, as client quotas); when a rate is above its bound the answer is the time
for it to come back (Kafka's `QuotaUtils.throttleTime`, at most one window): the network layer then
stops accepting on that listener for that long (Kafka's Acceptor blocks). An IP over its quota is not
recorded (Kafka unrecords it) and its connection is closed after the IP's throttle time, so a
reconnecting client cannot spin.

`max.connection.creation.rate` is a dynamic broker config, as in Kafka (`DynamicConnectionQuota`,
`ConnectionQuotas.updateBrokerMaxConnectionRate`): with `broker_rate_source` the bound is read at each
new connection (the wiring reads the image's per-broker, then cluster-default, then static value), so an
IncrementalAlterConfigs takes effect on the next connection; the rates recorded so far are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.cluster.quotas import QuotaWindow, Rate

INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConnectionThrottle:
    accept_delay_ms: int = 0  # block the listener's accepts this long
    ip_close_delay_ms: int = 0  # > 0: refuse this connection, closing it after this long


class ConnectionQuotas:
    def __init__(self, window: QuotaWindow, broker_rate: int, listener_rates: Mapping[str, int],
                 inter_broker_listener: str, ip_quota: Callable[[str], float | None],
                 broker_rate_source: Callable[[], int] | None = None) -> None:
        self.window = window
        self.broker_rate = broker_rate
        self.broker_rate_source = broker_rate_source
        self.listener_rates = dict(listener_rates)
        self.inter_broker_listener = inter_broker_listener.upper()
        self.ip_quota = ip_quota
        self._broker = Rate(window)
        self._listeners: dict[str, Rate] = {}
        self._ips: dict[str, Rate] = {}

    @property
    def enabled(self) -> bool:
        return True

    def _throttle(self, rate: Rate, bound: float, now_ms: int) -> int:
        value = rate.measure(now_ms)
        if value <= bound:
            return 0
        window = rate.window_size_ms(now_ms)
        return max(1, min(self.window.window_ms, round((value - bound) / bound * window)))

    def record(self, listener: str, ip: str, now_ms: int) -> ConnectionThrottle:
        """A new connection on `listener` from `ip` at `now_ms`."""
        quota = self.ip_quota(ip)
        if quota is not None:
            rate = self._ips.get(ip)
            if rate is None:
                rate = self._ips[ip] = Rate(self.window)
            rate.record(1.0, now_ms)
            throttle = self._throttle(rate, quota, now_ms)
            if throttle:
                rate.record(-1.0, now_ms)
                return ConnectionThrottle(ip_close_delay_ms=throttle)
        name = listener.upper()
        delays = [0]
        bound = self.listener_rates.get(name, INT_MAX)
        if bound < INT_MAX:
            lrate = self._listeners.get(name)
            if lrate is None:
                lrate = self._listeners[name] = Rate(self.window)
            lrate.record(1.0, now_ms)
            delays.append(self._throttle(lrate, bound, now_ms))
        if self.broker_rate_source is not None:
            self.broker_rate = self.broker_rate_source()
        if self.broker_rate < INT_MAX and name != self.inter_broker_listener:
            self._broker.record(1.0, now_ms)
            delays.append(self._throttle(self._broker, max(self.broker_rate, 1), now_ms))
        return ConnectionThrottle(accept_delay_ms=max(delays))


def ip_connection_rate(entities: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]],
                       ip: str) -> float | None:
    """The `connection_creation_rate` quota of `ip`: its own entity, else the default ip's."""
    for key in (((("ip", ip),)), ((("ip", None),))):
        value = entities.get(key, {}).get("connection_creation_rate")
        if value is not None:
            return value
    return None
