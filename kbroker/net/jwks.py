"""Fetching the JWKS of `sasl.oauthbearer.jwks.endpoint.url` (KIP-768), Kafka's `RefreshingHttpsJwks`.

Why here: net/ is the only layer that does network I/O; the validator (kbroker.security.oauthbearer)
only reads the keys. The URL may be `https://`, `http://` or `file:` (Kafka accepts the three). The
first fetch happens at start-up (retrying with `sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`
doubling up to `...retry.backoff.max.ms`, as Kafka's `Retry`); a failure there fails the start, as in
Kafka. Then a daemon thread refreshes every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and sooner
when a token names a `kid` the keys do not have (at most once per backoff), so a rotated key is
picked up without waiting an hour. The keys object is replaced whole: readers on the event loop never
see a half-updated set.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request

from kbroker.security.oauthbearer import JwksKeys, parse_jwks

log = logging.getLogger(__name__)


class JwksRefresher:
    def __init__(self, url: str, *, refresh_ms: int = 3600000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 10000, timeout_s: float = 10.0) -> None:
        self.url = url
        self.refresh_ms = refresh_ms
        self.retry_backoff_ms = max(1, retry_backoff_ms)
        self.retry_backoff_max_ms = max(self.retry_backoff_ms, retry_backoff_max_ms)
        self.timeout_s = timeout_s
        self.keys = JwksKeys(request_refresh=self._wake_up)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_fetch = 0.0

    def _fetch(self) -> None:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:  # noqa: S310 - the operator's URL
            document = resp.read()
        self.keys.update(parse_jwks(document))
        self._last_fetch = time.monotonic()

    def start(self) -> None:
        """Fetch once (with retries) and start refreshing; raises the last error when the JWKS cannot
        be read within the retry budget."""
        backoff = self.retry_backoff_ms
        deadline = time.monotonic() + self.retry_backoff_max_ms / 1000 * 2
        while True:
            try:
                self._fetch()
                break
            except (OSError, ValueError) as exc:
                if time.monotonic() >= deadline:
                    raise ValueError(f"cannot read the JWKS at {self.url}: {exc}") from exc
                time.sleep(backoff / 1000)
                backoff = min(backoff * 2, self.retry_backoff_max_ms)
        self._thread = threading.Thread(target=self._run, name="jwks-refresher", daemon=True)
        self._thread.start()

    def _wake_up(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.refresh_ms / 1000)
            if self._stop.is_set():
                return
            requested = self._wake.is_set()
            self._wake.clear()
            if requested and time.monotonic() - self._last_fetch < self.retry_backoff_ms / 1000:
                time.sleep(self.retry_backoff_ms / 1000)
            try:
                self._fetch()
            except (OSError, ValueError) as exc:
                log.warning("Could not refresh the JWKS from %s: %s", self.url, exc)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
