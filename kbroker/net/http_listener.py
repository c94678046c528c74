"""The HTTP listener for Prometheus and probes: `/metrics`, `/health/live`, `/health/ready`.

Kafka has no HTTP listener (its metrics are JMX MBeans, which operators scrape through the JMX
exporter's Java agent on a port of its own). kbroker serves the same names itself, on a separate
port given by `kbroker.metrics.listener` (`http://127.0.0.1:9404`: 9404 is the port the JMX
exporter is commonly run on for Kafka); empty (the default) opens nothing. It runs on the broker's
event loop as one more asyncio server: no thread, and a scrape is answered between two requests.

HTTP is kept to what scrapers and probes send: one `GET` (or `HEAD`) per connection, answered with
`Connection: close`. Anything else gets 400, 404 or 405; a request head above 8 KiB or not complete
within 10 s closes the connection. The body of `/metrics` is rendered by a callable of the wiring
(`kbroker.metrics.exposition.MetricsExposition.render`), the health answers by two probe callables
returning (healthy, detail): 200 with the detail when healthy, else 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD = 8192
REQUEST_TIMEOUT_S = 10.0

Probe = Callable[[], tuple[bool, dict[str, object]]]


@dataclass(frozen=True)
class HttpEndpoint:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_http_listener(value: str) -> HttpEndpoint | None:
    """`http://host:port` -> the endpoint; "" -> None. Raises ValueError with the key's name otherwise."""
    value = value.strip()
    if not value:
        return None
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or port is None or parts.path not in ("", "/") or parts.hostname is None:
        raise ValueError(
            f"Invalid value {value} for configuration kbroker.metrics.listener: "
            "expected http://host:port (port 0: any free port), or empty for no listener")
    return HttpEndpoint(parts.hostname, port)


class MetricsHttpServer:
    """Serves the exposition and the probes on one address; `start()` returns the bound endpoint."""

    def __init__(self, endpoint: HttpEndpoint, render_metrics: Callable[[], bytes], content_type: str,
                 live: Probe, ready: Probe) -> None:
        self.endpoint = endpoint
        self.render_metrics = render_metrics
        self.content_type = content_type
        self.live = live
        self.ready = ready
        self.bound: HttpEndpoint | None = None
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.StreamWriter] = set()

    async def start(self) -> HttpEndpoint:
        self._server = await asyncio.start_server(self._serve, self.endpoint.host, self.endpoint.port,
                                                  reuse_address=True, limit=MAX_REQUEST_HEAD)
        port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self.endpoint.port
        self.bound = HttpEndpoint(self.endpoint.host, port)
        return self.bound

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._clients):
            writer.close()
        try:
            await asyncio.wait_for(self._server.wait_closed(), 2.0)
        except TimeoutError:
            pass
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.add(writer)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            status, ctype, body, head_only = self._answer(head)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode("ascii"))
            if not head_only:
                writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass
        except Exception:  # noqa: BLE001 - a scrape must never take the broker down
            log.exception("Error while answering an HTTP request on %s", self.bound)
        finally:
            self._clients.discard(writer)
            writer.close()

    def _answer(self, head: bytes) -> tuple[str, str, bytes, bool]:
        """(status line, content type, body, HEAD) for one request head."""
        try:
            method, target, _version = head.split(b"\r\n", 1)[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError):
            return "400 Bad Request", "text/plain", b"bad request\n", False
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n", False
        head_only = method == "HEAD"
        path = urlsplit(target).path
        if path == "/metrics":
            return "200 OK", self.content_type, self.render_metrics(), head_only
        if path in ("/health/live", "/health/ready"):
            healthy, detail = (self.live if path == "/health/live" else self.ready)()
            body = (json.dumps({"status": "UP" if healthy else "DOWN", **detail}) + "\n").encode()
            return ("200 OK" if healthy else "503 Service Unavailable"), "application/json", body, head_only
        return "404 Not Found", "text/plain", b"not found: try /metrics, /health/live, /health/ready\n", head_only
