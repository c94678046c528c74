"""The API dispatcher: routes a decoded request to the handler module for its API key.

Owns handler discovery (every module of the `kbroker.api` package that defines `API_KEY` is a
handler, so helpers never edit a shared list; the generated `handler_index.py` records them, a test keeps
it equal to a scan, and a handler module is imported at its API's first request, not at start), the
ranges ApiVersions advertises, the version gate,
and Kafka's answers to requests it cannot serve (ApiVersions: a v0 UNSUPPORTED_VERSION body listing
our ranges, KIP-511; anything else: close the connection).

A handler module defines `API_KEY`, `MIN_VERSION`, `MAX_VERSION` (accepted and advertised), an
optional `ADVERTISED_MIN_VERSION` (Produce advertises 0 but refuses 0-2, KAFKA-18659), an optional
`error_response(request, version, error) -> response` used when the handler raises, and
`handle(services, ctx, header, request)`.

Listeners: a dispatcher serves one kind of listener, "broker" (the default, every client-facing
listener) or "controller" (`controller.listener.names`, KRaft). A module is served on the kinds its
API's spec lists (`"listeners"` in Kafka's JSON: BrokerRegistration, BrokerHeartbeat, AlterPartition
and AllocateProducerIds are controller-only), unless it narrows them with a `LISTENERS` tuple.

Throttling (client quotas, kbroker/cluster/quotas.py): the dispatcher is the one response hook. On a
broker listener, with a `request_percentage` quota set, it times each handler call on the loop and
records it into the request quota; the response's `throttle_time_ms` becomes the largest of that, of
what the handler set in `ctx.throttle_time_ms` (the produce byte rate) and of the handler's own value
(the fetch byte rate, the controller mutation rate). Handlers keep answering `throttle_time_ms=0`.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import pkgutil
import time
from collections.abc import Awaitable
from functools import partial
from types import ModuleType
from typing import Any, NamedTuple

from kbroker.api._futures import chain_future, identity
from kbroker.api.context import (
    CURRENT_REQUEST_ORIGIN,
    NO_RESPONSE,
    BrokerServices,
    CloseConnection,
    RequestContext,
    RequestOrigin,
    is_awaitable_result,
)
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17


class HandlerSpec:
    """One API's handler: its ranges from the index, its module imported at the API's first request."""

    __slots__ = ("api_key", "min_version", "max_version", "advertised_min_version", "module_name", "_module")

    def __init__(self, api_key: int, min_version: int, max_version: int, advertised_min_version: int,
                 module_name: str, module: ModuleType | None = None) -> None:
        self.api_key = api_key
        self.min_version = min_version
        self.max_version = max_version
        self.advertised_min_version = advertised_min_version
        self.module_name = module_name
        self._module = module

    @property
    def module(self) -> ModuleType:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self.module_name)
        return module

    @property
    def name(self) -> str:
        return self.module_name.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        return (f"HandlerSpec({self.api_key}, {self.name}, {self.min_version}-{self.max_version}, "
                f"advertised from {self.advertised_min_version})")


class IndexEntry(NamedTuple):
    """What the dispatcher needs of a handler module before its first request (`handler_index.py`)."""

    api_key: int
    module: str  # in the package
    min_version: int
    max_version: int
    advertised_min_version: int
    listeners: tuple[str, ...]
    kraft_broker_forwards: bool
    single_node_only: bool


def scan_handlers(package: str = "kbroker.api") -> list[IndexEntry]:
    """Import every module of `package` and describe those that define `API_KEY` (helpers add a module,
    never edit a shared list): what `handler_index.py` records, so that a node need not import them all
    to start."""
    from kbroker.protocol.messages import API_SPECS

    pkg = importlib.import_module(package)
    entries: list[IndexEntry] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        key = getattr(module, "API_KEY", None)
        if key is None:
            continue
        api = API_SPECS.get(int(key))
        listeners = tuple(getattr(module, "LISTENERS", api.listeners if api is not None else ("broker",)))
        lo, hi = int(module.MIN_VERSION), int(module.MAX_VERSION)
        entries.append(IndexEntry(int(key), info.name, lo, hi, int(getattr(module, "ADVERTISED_MIN_VERSION", lo)),
                                  listeners, bool(getattr(module, "KRAFT_BROKER_FORWARDS", False)),
                                  bool(getattr(module, "SINGLE_NODE_ONLY", False))))
    return entries


def discover_handlers(package: str = "kbroker.api", listener: str = "broker",
                      kraft_broker: bool = False) -> dict[int, HandlerSpec]:
    """The handlers served on `listener` ("broker" or "controller"). For `kbroker.api` they are read from
    the generated `handler_index.py` and each module is imported at its API's first request (a node
    starts without importing ninety handlers and their messages: issue 17, P5); for another package,
    from a scan of its modules.

    A module is served on the kinds its API's spec lists unless it narrows them with `LISTENERS`; one
    with `KRAFT_BROKER_FORWARDS = True` is served on a broker listener only when `kraft_broker` (a
    process.roles=broker node forwards it to the controller); one with `SINGLE_NODE_ONLY = True` only
    when not (kbroker's single node serves it itself)."""
    if package == "kbroker.api":
        from kbroker.api.handler_index import HANDLERS

        entries = [IndexEntry(*row) for row in HANDLERS]
    else:
        entries = scan_handlers(package)
    specs: dict[int, HandlerSpec] = {}
    for e in entries:
        if listener not in e.listeners:
            continue
        if listener == "broker" and e.kraft_broker_forwards and not kraft_broker:
            continue
        if e.single_node_only and kraft_broker:
            continue  # an API kbroker's single node serves and a KRaft broker does not forward yet
        if e.api_key in specs:
            raise RuntimeError(f"API key {e.api_key} handled by both {specs[e.api_key].module_name} and {e.module}")
        specs[e.api_key] = HandlerSpec(e.api_key, e.min_version, e.max_version, e.advertised_min_version,
                                       f"{package}.{e.module}")
    return specs


def render_handler_index(package: str = "kbroker.api") -> str:
    """The text of `kbroker/api/handler_index.py`, from a scan of the handler modules."""
    rows = "".join(f"    {tuple(e)!r},\n" for e in scan_handlers(package))
    return (
        "# Code generated by `python -m kbroker.api.dispatcher --write-index`. DO NOT EDIT.\n"
        '"""Every handler module of kbroker/api as `scan_handlers` reads it: (api_key, module, min_version,\n'
        "max_version, advertised_min_version, listeners, kraft_broker_forwards, single_node_only). The\n"
        "dispatcher starts from this table and imports a handler at its API's first request, so a node does\n"
        'not import ninety handlers and their messages to start (issue 17, P5).\n"""\n\n'
        "HANDLERS: tuple[tuple[int, str, int, int, int, tuple[str, ...], bool, bool], ...] = (\n"
        f"{rows})\n"
    )


class ApiDispatcher:
    """`handle(ctx, header, body)` -> response | awaitable of a response | NO_RESPONSE."""

    def __init__(self, services: BrokerServices, package: str = "kbroker.api", listener: str = "broker") -> None:
        self.services = services
        self.listener = listener
        self.handlers = discover_handlers(package, listener, kraft_broker=services.kraft is not None)
        # The ApiVersions handler reads the advertised ranges from the services.
        services.api_ranges = self.advertised_ranges()

    def advertised_ranges(self) -> dict[int, tuple[int, int]]:
        return {k: (s.advertised_min_version, s.max_version) for k, s in sorted(self.handlers.items())}

    def handle(self, ctx: RequestContext, header: RequestHeader, body: Any) -> Any:
        key = header.api_key
        version = header.api_version
        sasl = ctx.sasl
        if sasl is not None and sasl.session_expiration_ms and sasl.complete:
            # KIP-368: a SaslHandshake begins re-authentication; any other request after the session
            # ended closes the connection (Kafka's SocketServer: "Disconnecting expired channel").
            if not (key == SASL_HANDSHAKE_KEY and sasl.begin_reauthentication()) and \
                    sasl.session_expired(self.services.time_ms()):
                log.info("Disconnecting expired channel %s (%s): its session ended without re-authentication",
                         ctx.connection_id, ctx.principal)
                raise CloseConnection("the SASL session expired (connections.max.reauth.ms)")
        if sasl is not None and not sasl.complete:
            # A SASL listener before authentication: ApiVersions and the SASL requests only (Kafka's
            # SaslServerAuthenticator; anything else is an IllegalSaslStateException and a close).
            if not sasl.allows(key):
                raise CloseConnection(f"Unexpected Kafka request of type {key} during SASL handshake.")
            if key == API_VERSIONS_KEY:
                sasl.on_api_versions()
        spec = self.handlers.get(key)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            return self.handle_unsupported(ctx, header)
        quotas = self.services.quotas
        timed = quotas is not None and self.listener == "broker" and quotas.request.quotas_enabled
        started = time.perf_counter_ns() if timed else 0
        try:
            result = spec.module.handle(self.services, ctx, header, body)
        except CloseConnection:
            raise
        except Exception as exc:
            result = self._error_response(spec, header, body, exc)
        throttle_ms = ctx.throttle_time_ms
        if timed and quotas is not None and not _exempt_from_request_quota(key, body):
            throttle_ms = max(throttle_ms, self._request_quota(ctx, header, time.perf_counter_ns() - started))
        if throttle_ms:
            ctx.throttle_time_ms = throttle_ms
        if result is NO_RESPONSE or not is_awaitable_result(result):
            if throttle_ms:
                _apply_throttle(result, throttle_ms)
            return result
        if asyncio.isfuture(result):
            # Delayed produce/fetch and waiting JoinGroup/SyncGroup hand back a loop future: chain the
            # error mapping onto it with a callback instead of a coroutine, so no Task per request.
            on_result = partial(_apply_throttle, ms=throttle_ms) if throttle_ms else identity
            return chain_future(result, on_result, partial(self._error_response, spec, header, body))
        return self._guard(spec, header, body, result, throttle_ms,
                           RequestOrigin(ctx.principal, ctx.peer[0], header.client_id or ""))

    def _request_quota(self, ctx: RequestContext, header: RequestHeader, elapsed_ns: int) -> int:
        """The request quota's throttle time for a request that kept the loop `elapsed_ns` (Kafka's
        `ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs` with the handler thread's time)."""
        quotas = self.services.quotas
        assert quotas is not None
        user = ctx.principal.partition(":")[2]
        client_id = header.client_id or ""
        throttle_ms = quotas.request.record_request_time_ns(user, client_id, elapsed_ns)
        quotas.request.throttle(user, client_id, throttle_ms)
        return throttle_ms

    async def _guard(self, spec: HandlerSpec, header: Any, body: Any, awaitable: Awaitable[Any],
                     throttle_ms: int = 0, origin: RequestOrigin | None = None) -> Any:
        CURRENT_REQUEST_ORIGIN.set(origin)  # this task's context only
        try:
            response = await awaitable
        except CloseConnection:
            raise
        except Exception as exc:
            response = self._error_response(spec, header, body, exc)
        if throttle_ms:
            _apply_throttle(response, throttle_ms)
        return response

    def _error_response(self, spec: HandlerSpec, header: RequestHeader, body: Any, exc: Exception) -> Any:
        """Kafka answers a handler failure with the API's error response (`getErrorResponse`)."""
        if isinstance(exc, KafkaError):
            error = exc.error_code
        else:
            error = ErrorCode.UNKNOWN_SERVER_ERROR
            log.exception(
                "error handling %s v%d (correlation id %d)",
                spec.name,
                header.api_version,
                header.correlation_id,
            )
        build = getattr(spec.module, "error_response", None)
        if build is None:
            raise CloseConnection(f"{spec.name} failed: {exc!r}") from exc
        return build(body, header.api_version, error)

    def handle_unsupported(self, ctx: RequestContext, header: RequestHeader) -> Any:
        """A request for a key/version we do not serve.

        ApiVersions: Kafka answers with a v0-encoded body carrying UNSUPPORTED_VERSION and ApiVersions'
        own range only, so that a newer client retries with a version we know (KIP-511). The
        network layer encodes this response at version 0. Any other API: close the connection, as
        Kafka's SocketServer does for a request it cannot parse. Checked against Kafka 4.3.1
        (tests/differential/test_api_versions_vs_kafka.py): an unknown API key, an API not enabled on
        a broker listener (a controller-only one such as BrokerRegistration) and a version above the
        range all close the connection there too. Clients never get here for an API we leave out of
        ApiVersions: they refuse it themselves, at once (docs/compatibility.md).
        """
        if header.api_key == API_VERSIONS_KEY and API_VERSIONS_KEY in self.handlers:
            module = self.handlers[API_VERSIONS_KEY].module
            return module.unsupported_version_response(self.services)
        raise CloseConnection(
            f"unsupported request api_key={header.api_key} version={header.api_version}"
        )


PRODUCE_KEY = 0
FETCH_KEY = 1


def _exempt_from_request_quota(key: int, body: Any) -> bool:
    """A follower's Fetch is exempt from the request quota (Kafka's `maybeRecordExempt`), and so is an
    acks=0 Produce (KafkaApis: "the request quota is not enforced if acks == 0")."""
    if key == PRODUCE_KEY:
        return getattr(body, "acks", -1) == 0
    if key != FETCH_KEY:
        return False
    if getattr(body, "replica_id", -1) >= 0:
        return True
    state = getattr(body, "replica_state", None)
    return state is not None and getattr(state, "replica_id", -1) >= 0


def _apply_throttle(response: Any, ms: int) -> Any:
    """The response's `throttle_time_ms` becomes the larger of its own and `ms` (the quota response hook:
    handlers answer 0 and the quotas decide here)."""
    if ms > getattr(response, "throttle_time_ms", ms):
        response.throttle_time_ms = ms
    return response


def render_version_table(handlers: dict[int, HandlerSpec] | None = None) -> str:
    """The Markdown table of advertised versions that docs/compatibility.md embeds."""
    from kbroker.protocol.messages import API_SPECS

    # The broker listener of a `kbroker serve` node: a combined node, which forwards what a KRaft broker does.
    handlers = discover_handlers(kraft_broker=True) if handlers is None else handlers
    lines = [
        "| Key | API | Advertised | Kafka 4.3 | Notes |",
        "|----:|-----|-----------:|----------:|-------|",
    ]
    for key, spec in sorted(handlers.items()):
        api = API_SPECS.get(key)
        name = api.name if api is not None else spec.name
        kafka = f"{api.min_version}-{api.max_version}" if api is not None else "?"
        advertised = f"{spec.advertised_min_version}-{spec.max_version}"
        note = getattr(spec.module, "VERSION_NOTES", "") or _first_sentence(spec.module.__doc__)
        if spec.advertised_min_version != spec.min_version:
            note = f"(accepts {spec.min_version}-{spec.max_version}) {note}".strip()
        lines.append(f"| {key} | {name} | {advertised} | {kafka} | {note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"



def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


TABLE_START = "<!-- api-versions-table:start -->"
TABLE_END = "<!-- api-versions-table:end -->"


def embed_version_table(page: str, table: str) -> str:
    """`page` with the text between the table markers replaced by `table`."""
    head, _, rest = page.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    return f"{head}{TABLE_START}\n{table}{TABLE_END}{tail}"


if __name__ == "__main__":
    # `python -m kbroker.api.dispatcher` prints the table; `--write docs/compatibility.md` updates the page;
    # `--write-index` regenerates kbroker/api/handler_index.py.
    import sys
    from pathlib import Path

    if sys.argv[1:] == ["--write-index"]:
        (Path(__file__).parent / "handler_index.py").write_text(render_handler_index(), encoding="utf-8")
        raise SystemExit(0)
    _table = render_version_table()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        _page = Path(sys.argv[2])
        _page.write_text(embed_version_table(_page.read_text(encoding="utf-8"), _table), encoding="utf-8")
    else:
        print(_table, end="")
