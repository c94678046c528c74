"""The event loop's health: timer lag and idle ratio (the analogue of Kafka's network-processor idle ratio).

Kafka's network threads report NetworkProcessorAvgIdlePercent, the share of time a processor waited in
`select`; an operator reads a low value as "the network threads are saturated". kbroker serves every
connection from one asyncio loop, whose saturation shows in two ways, both measured here:

- **lag**: a timer asked to run every `interval` seconds runs late by however long the loop was busy
  (or blocked: a synchronous fsync, a long computation). Each tick observes its lateness into
  `EventLoopMetrics.lag` (`kbroker_eventloop_lag_ms`), so a stall shows as an observation in a high
  bucket and a rising maximum (`kbroker_eventloop_lag_max_ms`).
- **idle ratio**: over windows of about a second, 1 - (CPU time of the loop's thread / wall time)
  (`kafka_network_socketserver_networkprocessoravgidlepercent`, 0..1 like Kafka's). Time the thread
  is blocked off the CPU (an fsync) counts as idle here, which is why the lag is the better alarm.

A timer on the loop, not a task or a thread: ten wake-ups a second cost nothing measurable.
"""

from __future__ import annotations

import asyncio
import time

from kbroker.metrics.meters import EventLoopMetrics

# How often the lag is sampled; a stall shorter than this may be missed (it delays one tick at most).
DEFAULT_INTERVAL_S = 0.1
# Window of the idle ratio.
IDLE_WINDOW_S = 1.0


class EventLoopMonitor:
    """Samples the loop's lag every `interval` seconds into `metrics` until `stop()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: EventLoopMetrics,
                 interval: float = DEFAULT_INTERVAL_S) -> None:
        self.loop = loop
        self.metrics = metrics
        self.interval = interval
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0
        self._window_wall = 0.0
        self._window_cpu = 0.0

    def start(self) -> None:
        now = time.monotonic()
        self._window_wall, self._window_cpu = now, time.thread_time()
        self._schedule(now)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, now: float) -> None:
        self._expected = now + self.interval
        self._handle = self.loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        m = self.metrics
        lag = max(0.0, now - self._expected)
        m.lag.observe(lag)
        m.last_lag = lag
        if lag > m.max_lag:
            m.max_lag = lag
        wall = now - self._window_wall
        if wall >= IDLE_WINDOW_S:
            cpu = time.thread_time()  # this callback runs on the loop's thread
            m.idle_ratio = min(1.0, max(0.0, 1.0 - (cpu - self._window_cpu) / wall))
            self._window_wall, self._window_cpu = now, cpu
        self._schedule(now)
