"""Broker wiring: builds every layer from a `KafkaConfig`, runs the periodic log tasks, shuts down cleanly.

Owns `Broker` (startup: lock the log dirs, `kbroker.services.build_services` (storage, metadata image,
replica manager, topic manager, group coordinator), dispatcher, network; shutdown in reverse after
in-flight requests finish) and `run_broker` (the event loop, uvloop when installed, and SIGTERM/SIGINT
handling) used by `kbroker serve`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import fcntl
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kbroker
from kbroker import codecache
from kbroker.clock import Clock, wall_clock_ms
from kbroker.cluster.connection_quotas import ConnectionQuotas, ip_connection_rate
from kbroker.cluster.quotas import QuotaWindow
from kbroker.config import Endpoint, KafkaConfig
from kbroker.net import KafkaServer, ListenerEndpoint, SocketServerConfig
from kbroker.net.http_listener import HttpEndpoint
from kbroker.net.tls import TlsConfigError, TlsSettings, build_server_context
from kbroker.observability import BrokerObservability
from kbroker.security.delegation_token import (
    TokenCredential,
    TokenCredentialCache,
    TokenCredentials,
    create_hmac,
    principal_name,
)
from kbroker.security.jaas import parse_jaas_config
from kbroker.security.oauthbearer import JwksValidator, TokenValidator, UnsecuredJwsValidator
from kbroker.security.principal import SslPrincipalMapper
from kbroker.security.sasl import SaslServerConfig, ScramCredentials
from kbroker.security.scram import MECHANISM_TYPES, ScramCredential

if TYPE_CHECKING:
    from kbroker.api.context import BrokerServices
    from kbroker.api.dispatcher import ApiDispatcher
    from kbroker.coord.service import GroupCoordinatorService
    from kbroker.log.cleaner_manager import LogCleaner
    from kbroker.log.manager import LogManager
    from kbroker.metadata.cache import MetadataCache
    from kbroker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def tls_settings(config: KafkaConfig, listener: str) -> TlsSettings:
    """The `ssl.*` keys of one listener (`listener.name.<l>.ssl.*` over the broker-wide ones)."""
    def v(key: str) -> Any:
        return config.listener_value(listener, key)

    return TlsSettings(
        keystore_location=v("ssl.keystore.location"),
        key_password=v("ssl.key.password"),
        keystore_type=str(v("ssl.keystore.type") or "JKS"),
        keystore_password=v("ssl.keystore.password"),
        truststore_type=str(v("ssl.truststore.type") or "JKS"),
        truststore_password=v("ssl.truststore.password"),
        keystore_key=v("ssl.keystore.key"),
        keystore_certificate_chain=v("ssl.keystore.certificate.chain"),
        truststore_location=v("ssl.truststore.location"),
        truststore_certificates=v("ssl.truststore.certificates"),
        client_auth=str(v("ssl.client.auth") or "none"),
        enabled_protocols=tuple(v("ssl.enabled.protocols") or ()),
        cipher_suites=tuple(v("ssl.cipher.suites") or ()),
        principal_mapping_rules=str(v("ssl.principal.mapping.rules") or "DEFAULT"),
    )


def sasl_server_config(config: KafkaConfig, listener: str,
                       scram_credentials: ScramCredentials | None,
                       token_credentials: TokenCredentials | None = None) -> SaslServerConfig:
    mechanisms = tuple(config.sasl_mechanisms(listener))
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        jaas = config.sasl_jaas_config(listener, "PLAIN")
        if jaas is not None:
            users = parse_jaas_config(jaas).plain_users()
    return SaslServerConfig(
        enabled_mechanisms=mechanisms,
        plain_users=users,
        scram_credentials=scram_credentials or _no_scram_credentials,
        oauthbearer=oauthbearer_validator(config, listener) if "OAUTHBEARER" in mechanisms else None,
        connections_max_reauth_ms=int(config.listener_value(listener, "connections.max.reauth.ms") or 0),
        token_credentials=token_credentials,
    )


def connection_quotas(config: KafkaConfig, services: BrokerServices) -> ConnectionQuotas:
    """KIP-612's connection creation rates: `max.connection.creation.rate`, its per-listener
    overrides, and the ip entities' `connection_creation_rate` quotas of the metadata image."""
    listener_rates = {}
    for e in config.listeners:
        rate = config.originals.get(f"listener.name.{e.name.lower()}.max.connection.creation.rate")
        if rate is not None:
            listener_rates[e.name] = int(rate)
    cache = services.metadata
    static_rate = int(config["max.connection.creation.rate"])
    return ConnectionQuotas(
        QuotaWindow(int(config["quota.window.num"]), int(config["quota.window.size.seconds"]) * 1000),
        static_rate, listener_rates, config.inter_broker_listener_name,
        lambda ip: ip_connection_rate(cache.image.client_quotas.entities, ip),
        broker_rate_source=dynamic_connection_creation_rate(services, static_rate))


def dynamic_connection_creation_rate(services: BrokerServices, static_rate: int) -> Callable[[], int]:
    """`max.connection.creation.rate` as the image sets it now (Kafka's DynamicConnectionQuota): this
    broker's dynamic value, else the cluster-wide dynamic default, else the static one. Read again only
    when the image changed."""
    cache = services.metadata
    seen_image: list[object] = [None]
    current = [static_rate]

    def rate() -> int:
        image = cache.image
        if seen_image[0] is not image:
            seen_image[0] = image
            levels = services.configs.broker_levels("max.connection.creation.rate")
            try:
                value = int(str(levels[0].value)) if levels and levels[0].value is not None else static_rate
            except ValueError:
                value = static_rate
            if value != current[0]:
                log.info("max.connection.creation.rate is now %d (was %d)", value, current[0])
            current[0] = value
        return current[0]

    return rate


JWKS_VALIDATOR_CLASSES = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                          "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")


def oauthbearer_validator(config: KafkaConfig, listener: str) -> TokenValidator:
    """Kafka's choice of OAUTHBEARER server callback handler for a listener:
    `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class` naming
    OAuthBearerValidatorCallbackHandler validates signed tokens against the JWKS of
    `sasl.oauthbearer.jwks.endpoint.url`; without it, unsecured tokens (development) with the JAAS
    `unsecuredValidator*` options."""
    handler = config.originals.get(f"listener.name.{listener.lower()}.oauthbearer.sasl.server.callback.handler.class")
    if handler is None:
        handler = config.originals.get("sasl.server.callback.handler.class")
    if handler is not None and str(handler).strip() in JWKS_VALIDATOR_CLASSES:
        url = config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.url")
        if not url:
            raise ValueError(f"{handler} on listener {listener} needs sasl.oauthbearer.jwks.endpoint.url")
        from kbroker.net.jwks import JwksRefresher  # urllib.request and http.client: only for this handler

        refresher = JwksRefresher(
            str(url), refresh_ms=int(config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.refresh.ms")),
            retry_backoff_ms=int(config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms")),
            retry_backoff_max_ms=int(
                config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms")))
        refresher.start()
        issuer = config.listener_value(listener, "sasl.oauthbearer.expected.issuer")
        return JwksValidator(
            refresher.keys, wall_clock_ms,
            expected_audience=tuple(config.listener_value(listener, "sasl.oauthbearer.expected.audience") or ()),
            expected_issuer=str(issuer) if issuer else None,
            clock_skew_ms=int(config.listener_value(listener, "sasl.oauthbearer.clock.skew.seconds")) * 1000,
            sub_claim=str(config.listener_value(listener, "sasl.oauthbearer.sub.claim.name")),
            scope_claim=str(config.listener_value(listener, "sasl.oauthbearer.scope.claim.name")))
    if handler is not None and str(handler).strip():
        raise ValueError(f"OAUTHBEARER server callback handler {handler} on listener {listener}: kbroker provides "
                         f"{JWKS_VALIDATOR_CLASSES[0]} and the default (unsecured JWS) only")
    jaas = config.sasl_jaas_config(listener, "OAUTHBEARER")
    options = parse_jaas_config(jaas).options if jaas else {}
    return UnsecuredJwsValidator.from_jaas_options(options, wall_clock_ms)


def image_scram_credentials(services: BrokerServices) -> ScramCredentials:
    """SCRAM credentials as the metadata image holds them now (UserScramCredentialRecord)."""
    cache = services.metadata

    def lookup(mechanism: str, user: str) -> ScramCredential | None:
        cred = cache.image.scram.get(MECHANISM_TYPES.get(mechanism, 0), user)
        if cred is None:
            return None
        return ScramCredential(cred.salt, cred.stored_key, cred.server_key, cred.iterations)

    return lookup


def image_token_credentials(services: BrokerServices) -> TokenCredentials | None:
    """Delegation tokens (KIP-48) as the metadata image holds them now, with each token's SCRAM
    credential derived from `delegation.token.secret.key` (None when the key is unset: tokens disabled)."""
    secret = services.config["delegation.token.secret.key"]
    if not secret:
        return None
    cache = services.metadata
    credentials = TokenCredentialCache()
    seen: list[object] = [None]

    def lookup(mechanism: str, token_id: str) -> TokenCredential | None:
        image = cache.image.delegation_tokens
        if seen[0] is not image:
            seen[0] = image
            credentials.retain(set(image.tokens))
        token = image.tokens.get(token_id)
        if token is None or mechanism not in MECHANISM_TYPES:
            return None
        credential = credentials.credential(mechanism, token_id, create_hmac(token_id, str(secret)))
        return TokenCredential(credential, principal_name(token.owner), token.expiration_timestamp)

    return lookup


def _no_scram_credentials(mechanism: str, user: str) -> ScramCredential | None:
    return None


def listener_endpoint(config: KafkaConfig, e: Endpoint,
                      scram_credentials: ScramCredentials | None = None,
                      token_credentials: TokenCredentials | None = None) -> ListenerEndpoint:
    """One listener with its TLS context and SASL settings (raises StartupError on a bad keystore)."""
    protocol = e.security_protocol
    ssl_context = None
    rules = "DEFAULT"
    if protocol in ("SSL", "SASL_SSL"):
        settings = tls_settings(config, e.name)
        rules = settings.principal_mapping_rules
        try:
            SslPrincipalMapper(rules)
            ssl_context = build_server_context(settings)
        except (TlsConfigError, ValueError) as exc:
            raise StartupError(f"Cannot configure TLS on listener {e.name}: {exc}") from None
    sasl = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        try:
            sasl = sasl_server_config(config, e.name, scram_credentials, token_credentials)
        except ValueError as exc:  # an OAUTHBEARER validator that cannot be built (JWKS, JAAS options)
            raise StartupError(f"Cannot configure SASL on listener {e.name}: {exc}") from None
    return ListenerEndpoint(
        e.name, e.host, e.port, protocol, ssl_context=ssl_context, principal_mapping_rules=rules, sasl=sasl,
        failed_authentication_delay_ms=config["connection.failed.authentication.delay.ms"],
        sock=_reserved_socket(config, e),
    )


def _reserved_socket(config: KafkaConfig, e: Endpoint) -> socket.socket | None:
    """The implicit controller listener's socket, held since its port was picked (`with_implicit_quorum`)."""
    sock = config.implicit_controller_socket
    if sock is None or sock.fileno() < 0 or e.name not in config.controller_listener_names:
        return None
    return sock if sock.getsockname()[1] == e.port else None


def socket_server_config(config: KafkaConfig, scram_credentials: ScramCredentials | None = None,
                         endpoints: list[Endpoint] | None = None,
                         token_credentials: TokenCredentials | None = None) -> SocketServerConfig:
    """The network layer's settings, read from the broker config (kbroker.net never reads KafkaConfig).
    `endpoints`: the listeners to bind (default: the broker listeners; a controller binds its own)."""
    return SocketServerConfig(
        listeners=tuple(listener_endpoint(config, e, scram_credentials, token_credentials)
                        for e in (config.listeners if endpoints is None else endpoints)),
        socket_request_max_bytes=config["socket.request.max.bytes"],
        socket_send_buffer_bytes=config["socket.send.buffer.bytes"],
        socket_receive_buffer_bytes=config["socket.receive.buffer.bytes"],
        socket_listen_backlog_size=config["socket.listen.backlog.size"],
        queued_max_requests=config["queued.max.requests"],
        queued_max_request_bytes=config["queued.max.request.bytes"],
        max_connections=config["max.connections"],
        max_connections_per_ip=config["max.connections.per.ip"],
        connections_max_idle_ms=config["connections.max.idle.ms"],
        request_receive_timeout_ms=config["kbroker.request.receive.timeout.ms"],
        sendfile_enable=config["kbroker.sendfile.enable"],
    )


class StartupError(Exception):
    """The broker cannot start (a port in use, an unusable data directory): shown as one line, exit 1."""


def bind_error_message(listener: str, host: str, port: int, e: OSError) -> str:
    """One line for a listener that cannot bind, saying what to do (Kafka: "Socket server failed to bind
    to host:port: Address already in use")."""
    if e.errno == errno.EADDRINUSE:
        other = f"PLAINTEXT://{host or '127.0.0.1'}:{port + 1 if port else 9093}"
        return (f"Cannot listen on {listener}: port {port} is already in use (another kbroker or Kafka?). "
                f"Stop that process, or pick another port: kbroker serve --override listeners={other} "
                f"(in the repository: make run ARGS=\"--override listeners={other}\")")
    if e.errno == errno.EACCES:
        return (f"Cannot listen on {listener}: permission denied (ports below 1024 need privileges); "
                f"pick a port above 1024 with --override listeners=PLAINTEXT://{host or '127.0.0.1'}:9092")
    return f"Cannot listen on {listener}: {e.strerror or e}"


def check_listeners_free(config: KafkaConfig) -> None:
    """Bind (and release) every listener's fixed port before the data dirs are touched, so a port in
    use stops the start with nothing written (no freshly formatted data dir left behind)."""
    endpoints = config.controller_listeners if config.is_kraft_controller else config.listeners
    if config.is_kraft_combined:
        endpoints = config.controller_listeners + endpoints
    for e in endpoints:
        if e.port == 0 or _reserved_socket(config, e) is not None:  # port 0, or one this process holds
            continue
        try:
            infos = socket.getaddrinfo(e.host or None, e.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except OSError as err:
            raise StartupError(f"Cannot listen on {e}: cannot resolve host {e.host!r}: {err}") from None
        family, kind, proto, _name, addr = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the real listener does
            try:
                probe.bind(addr)
            except OSError as err:
                raise StartupError(bind_error_message(str(e), e.host, e.port, err)) from None


def _log_recovery(log_manager: LogManager, seconds: float) -> None:
    """After an unclean shutdown: say that recovery ran, over how many logs and segments, how long it took
    (Kafka logs "Recovering N logs ... since no clean shutdown file was found", then "Loaded N logs in Tms")."""
    unclean = {d for d, clean in log_manager.had_clean_shutdown.items() if not clean}
    logs = [lg for lg in log_manager.all_logs() if lg.parent_dir in unclean]
    if not logs:
        return  # a new data dir, or nothing to recover
    segments = 0
    for lg in logs:
        start = 0
        for i, seg in enumerate(lg.segments):
            if seg.base_offset <= lg.recovery_point:
                start = i
        segments += len(lg.segments) - start
    log.info(
        "Recovered %d logs (%d segments scanned) in %s after an unclean shutdown (no clean shutdown file was "
        "found) in %d ms",
        len(logs), segments, ", ".join(str(d) for d in sorted(unclean)), round(seconds * 1000),
    )


class Broker:
    """One kbroker node: storage, metadata image and controller, replica manager, coordinators, APIs, network."""

    def __init__(self, config: KafkaConfig, time_ms: Clock = wall_clock_ms) -> None:
        self.config = config
        self.time_ms = time_ms
        self.services: BrokerServices | None = None
        self.log_manager: LogManager | None = None
        self.metadata: MetadataCache | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinatorService | None = None
        self.dispatcher: ApiDispatcher | None = None
        self.server: KafkaServer | None = None
        # A combined node (process.roles=broker,controller): the controller listener's server and dispatcher.
        self.controller_server: KafkaServer | None = None
        self.controller_dispatcher: ApiDispatcher | None = None
        self.cluster_id = ""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        self._lock_fds: list[int] = []
        self.log_cleaner: LogCleaner | None = None
        self._clean_future: asyncio.Future[Any] | None = None
        self._remove_on_shutdown: list[Path] = []
        self.observability: BrokerObservability | None = None
        self.metrics_endpoint: HttpEndpoint | None = None

    # -- startup --

    async def start(self) -> None:
        from kbroker.api.dispatcher import ApiDispatcher
        from kbroker.controller.legacy_migration import (
            LEGACY_METADATA_FILE,
            LegacyMetadataError,
            read_legacy_records,
        )
        from kbroker.log import KafkaStorageError, LogConfig
        from kbroker.log.manager import InconsistentMetaPropertiesError
        from kbroker.services import build_services

        self._loop = asyncio.get_running_loop()
        config = self.config
        if config.is_embedded_single_node:
            if (config.log_dirs[0] / LEGACY_METADATA_FILE).exists():
                # A kbroker 0.1 data dir: the single node's LocalController migrates its JSON image into
                # __cluster_metadata on this start; the next start runs it as a combined node.
                log.info("Migrating %s with the single-node controller; the next start runs a one-voter quorum",
                         config.log_dirs[0] / LEGACY_METADATA_FILE)
            else:
                # kbroker's single node is a combined node of a one-voter KRaft quorum (docs/cluster.md).
                config = self.config = config.with_implicit_quorum()
                metadata_dir = config.metadata_log_dir / "__cluster_metadata-0"
                if metadata_dir.is_dir() and not (metadata_dir / "quorum-state").exists() \
                        and any(metadata_dir.glob("*.log")):
                    log.info("%s was written by kbroker's single-node controller: it becomes the log of a one-voter "
                             "quorum", metadata_dir)
        log_dirs = config.log_dirs
        # Everything that can refuse the start is checked before anything is written (issue 19).
        try:
            LogConfig.from_props(config.broker_props())
            observability = self.observability = BrokerObservability(config)  # checks kbroker.metrics.listener
        except ValueError as e:
            raise StartupError(str(e)) from None
        legacy = log_dirs[0] / LEGACY_METADATA_FILE
        if legacy.exists():  # a kbroker 0.1 data dir: its image must read before it is migrated
            try:
                read_legacy_records(legacy, config.node_id)
            except LegacyMetadataError as e:
                raise StartupError(str(e)) from None
        check_listeners_free(config)
        fresh_dirs = [d for d in log_dirs if not d.exists()]
        try:
            # The metrics/health listener binds before anything is written: a port in use creates nothing.
            self.metrics_endpoint = await observability.bind()
        except OSError as e:
            raise StartupError(
                f"Cannot listen on kbroker.metrics.listener={config['kbroker.metrics.listener']}: "
                f"{e.strerror or e}"
            ) from None
        try:
            for d in log_dirs:
                d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StartupError(
                f"Cannot create log directory {e.filename}: {e.strerror}. Choose a writable directory: "
                "--override log.dirs=/path/to/data"
            ) from None
        self._lock_log_dirs(log_dirs)
        try:
            # Segment-roll fsyncs run on a worker thread (os.fsync releases the GIL), never on the
            # event loop that serves every connection; the recovery point moves when they finish.
            loading = time.monotonic()
            services = build_services(config, time_ms=self.time_ms, background_executor=self._run_in_background)
            _log_recovery(services.log_manager, time.monotonic() - loading)
        except (ValueError, InconsistentMetaPropertiesError, KafkaStorageError, LegacyMetadataError) as e:
            raise StartupError(str(e)) from None
        except OSError as e:
            # A KRaft node writes before it serves (quorum-state when its Raft client takes a new epoch,
            # then the leader's LeaderChangeMessage and the broker's registration): on a full or read-only
            # metadata log dir it cannot start, as Kafka's cannot (docs/operations.md, "A full disk").
            raise StartupError(
                f"Cannot start: writing {e.filename or config.metadata_log_dir} failed: {e.strerror or e}. A "
                f"KRaft node writes its quorum state and metadata log ({config.metadata_log_dir}) before it "
                "serves; free space there (or fix its permissions) and start again") from None
        self.services = services
        self.log_manager = services.log_manager
        self.metadata = services.metadata
        self.replica_manager = services.replica_manager
        self.log_cleaner = services.log_manager.cleaner
        self.cluster_id = services.cluster_id
        # The group coordinator starts loading __consumer_offsets now, not at the first group request,
        # so groups answer COORDINATOR_LOAD_IN_PROGRESS only while their partition loads.
        self.group_coordinator = services.group_coordinator
        self.group_coordinator.startup()
        services.transaction_coordinator.startup()
        if services.share_coordinator is not None:
            services.share_coordinator.startup()
        if services.kraft_controller is not None and services.kraft is not None:
            # process.roles=broker,controller: the controller side first (Raft, the QuorumController and the
            # controller listener, which the broker side registers through, as other voters and brokers do).
            await self._start_combined_controller(services, fresh_dirs)
        if services.kraft is not None:
            # process.roles=broker: fetch the quorum's metadata log until the image holds what it has
            # committed (hosting this broker's partitions as it goes), before listening and registering.
            # A combined node's broker side waits for its own Raft client the same way.
            from kbroker.server.kraft_broker import KRaftStartupError

            try:
                await services.kraft.catch_up()
            except KRaftStartupError as e:
                raise StartupError(str(e)) from None
        if services.kraft_controller is not None and services.kraft is None:
            # process.roles=controller: Raft and the QuorumController, served on the controller listener only.
            from kbroker.server.controller_apis import ControllerApis

            services.kraft_controller.start()
            self.dispatcher = ControllerApis(services, services.kraft_controller.manager)
            self.server = KafkaServer(socket_server_config(config, endpoints=config.controller_listeners), self.dispatcher,
                                      metrics=services.metrics)
        else:
            self.dispatcher = ApiDispatcher(services)
            self.server = KafkaServer(socket_server_config(config, image_scram_credentials(services),
                                                           token_credentials=image_token_credentials(services)),
                                      self.dispatcher,
                                      metrics=services.metrics,
                                      connection_quotas=connection_quotas(config, services))
            if services.share_partition_manager is not None:
                self.server.connection_disconnect_listeners.append(services.share_partition_manager.on_disconnect)
        # A KRaft broker (and a combined node's broker side) binds now and accepts once registered and
        # unfenced, as Kafka's BrokerServer enables its SocketServer after the controller acknowledged it.
        registers_first = services.kraft is not None
        try:
            bound = await self.server.start(start_serving=not registers_first)
        except OSError as e:
            # Lost a race for the port after check_listeners_free: leave no new data dir behind.
            self._remove_on_shutdown = fresh_dirs
            first = (config.controller_listeners if config.is_kraft_controller else config.listeners)[0]
            raise StartupError(
                bind_error_message(",".join(config["listeners"]), first.host, first.port, e)
            ) from None
        observability.attach(services, self.server)
        config.set_bound_ports([Endpoint(e.name, e.host, e.port, e.security_protocol) for e in bound])
        # Register with the controller now that the listeners are bound (RegisterBrokerRecord +
        # UnfenceBrokerRecord, a new broker epoch), as Kafka's BrokerLifecycleManager does.
        listeners = [(e.name, e.host, e.port, config.security_protocol_map.get(e.name, e.name))
                     for e in config.advertised_listeners]
        if services.kraft_controller is not None and services.kraft is None:
            epoch = -1  # a controller registers nowhere (Kafka's ControllerRegistration is not sent yet)
        elif services.kraft is not None:
            from kbroker.server.kraft_broker import KRaftStartupError

            try:
                epoch = await services.kraft.register(listeners)
            except KRaftStartupError as e:
                raise StartupError(str(e)) from None
            await self.server.enable_request_processing()
        else:
            epoch = services.controller.register_broker(listeners, config["broker.rack"])
        services.producer_id_manager.broker_epoch = epoch
        observability.set_running()  # /health/ready answers 200 from now on
        self._schedule_periodic_tasks()
        if services.kraft is None and services.kraft_controller is None and config["delegation.token.secret.key"]:
            # The single node's controller sweeps expired delegation tokens (a QuorumController does in poll).
            interval = int(config["delegation.token.expiry.check.interval.ms"])
            self._every(interval, interval, "delegation-token-expiry",
                        services.controller.sweep_expired_delegation_tokens)

    async def _start_combined_controller(self, services: BrokerServices, fresh_dirs: list[Path]) -> None:
        """A combined node's ControllerServer: start the Raft client and bind the controller listener, whose
        dispatcher (`ControllerApis`) serves the QuorumController; the broker listeners' handlers call the
        `RemoteController` (services.controller), as on any KRaft broker."""
        import dataclasses

        from kbroker.server.controller_apis import ControllerApis

        links = services.kraft_controller
        assert links is not None
        config = self.config
        links.start()
        # The controller listener's handlers: the QuorumController itself, no broker links (a forwarded
        # request arriving here is served, never forwarded again); ApiVersions ranges of its own.
        controller_services = dataclasses.replace(services, controller=links.controller, kraft=None, api_ranges={})
        self.controller_dispatcher = ControllerApis(controller_services, links.manager)
        self.controller_server = KafkaServer(socket_server_config(config, endpoints=config.controller_listeners),
                                             self.controller_dispatcher, metrics=services.metrics)
        try:
            await self.controller_server.start()
        except OSError as e:
            self._remove_on_shutdown = fresh_dirs
            first = config.controller_listeners[0]
            raise StartupError(bind_error_message(str(first), first.host, first.port, e)) from None

    def _run_in_background(self, job: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            job()  # shutting down: flush inline
            return
        loop.run_in_executor(None, job).add_done_callback(_log_background_failure)

    # -- log cleaner (compaction) --

    def _maybe_clean(self) -> None:
        """Start one cleaning round on the background executor if none is running (Kafka's
        CleanerThread.doWork; log.cleaner.threads > 1 still cleans one log at a time here).

        Choosing the log and snapshotting its segments happen here, on the loop. The worker reads
        inactive segments and writes `.cleaned` files; it hands the segment swap and the checkpoint
        update back to the loop (`_run_on_loop`), so appends, fetches and retention never see a
        half-replaced segment list.
        """
        loop = self._loop
        if self._stopped or loop is None or self.log_cleaner is None:
            return
        if self._clean_future is not None and not self._clean_future.done():
            return
        job = self.log_cleaner.next_job(self._run_on_loop, self.time_ms())
        if job is None:
            return
        fut = loop.run_in_executor(None, job)
        self._clean_future = fut

        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                return
            if f.exception() is not None:
                # The partition is now skipped (LogCleaner.uncleanable); the others go on.
                log.error("Log cleaner round failed: %s", f.exception())
            elif f.result() is not None:
                loop.call_soon(self._maybe_clean)  # more may be dirty: go on without waiting a backoff

        fut.add_done_callback(done)

    def _run_on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the event loop from a worker thread and wait for its result."""
        from kbroker.log.cleaner import CleanAborted

        loop = self._loop
        if loop is None or loop.is_closed():
            raise CleanAborted("the event loop is gone")
        cf: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not cf.set_running_or_notify_cancel():
                return
            try:
                cf.set_result(fn())
            except BaseException as e:  # handed to the waiting worker
                cf.set_exception(e)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError as e:  # closed meanwhile
            raise CleanAborted("the event loop is gone") from e
        while True:
            try:
                return cf.result(timeout=1.0)
            except concurrent.futures.TimeoutError:
                if loop.is_closed() and cf.cancel():
                    raise CleanAborted("the event loop is gone") from None

    def _lock_log_dirs(self, log_dirs: list[Path]) -> None:
        """Take `.lock` in every log dir, as Kafka does, so two brokers never share a data directory."""
        for d in log_dirs:
            try:
                fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StartupError(
                    f"Cannot write to log directory {d}: {e.strerror} ({d / '.lock'}). Check its owner and "
                    "permissions, or choose another directory: --override log.dirs=/path/to/data"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise StartupError(
                    f"Failed to acquire lock on file .lock in {d}. A Kafka instance in another process or "
                    "thread is using this directory."
                ) from None
            self._lock_fds.append(fd)

    def _schedule_periodic_tasks(self) -> None:
        c = self.config
        lm = self.log_manager
        assert lm is not None
        # Kafka's LogManager.startup schedules these on its scheduler with the same keys.
        self._every(
            c["log.initial.task.delay.ms"],
            c["log.retention.check.interval.ms"],
            "log-retention",
            lambda: lm.cleanup_logs(self.time_ms()),
        )
        self._every(
            c["log.initial.task.delay.ms"],
            c["log.flush.scheduler.interval.ms"],
            "log-flusher",
            lambda: lm.flush_dirty_logs(self.time_ms()),
        )
        # Recovery points, log start offsets and high watermarks are written together by checkpoint().
        interval = min(
            c["log.flush.offset.checkpoint.interval.ms"], c["log.flush.start.offset.checkpoint.interval.ms"]
        )
        # The offsets are read on the loop; the file writes and fsyncs run on the background executor.
        self._every(c["log.initial.task.delay.ms"], interval, "offset-checkpoint",
                    lambda: lm.checkpoint(background=True))
        # Kafka's cleaner thread sleeps log.cleaner.backoff.ms when no log needs cleaning.
        backoff = int(c.get("log.cleaner.backoff.ms", 15000))
        self._every(backoff, max(1, backoff), "log-cleaner", self._maybe_clean)

    def _every(self, delay_ms: int, interval_ms: int, name: str, task: Callable[[], Any]) -> None:
        """Run `task` after `delay_ms`, then every `interval_ms` (a timer on the loop, not a Task)."""
        if interval_ms <= 0 or interval_ms >= 2**62:
            return  # Long.MAX: the task is off, as with Kafka's default log.flush.scheduler.interval.ms
        loop = self._loop
        assert loop is not None

        def run() -> None:
            if self._stopped:
                return
            try:
                task()
            except Exception:
                log.exception("Periodic task %s failed", name)
            self._timers[name] = loop.call_later(interval_ms / 1000, run)

        # Like Kafka's scheduler: first run after log.initial.task.delay.ms, then every interval.
        self._timers[name] = loop.call_later(delay_ms / 1000, run)

    # -- shutdown --

    async def shutdown(self, controlled: bool = True) -> None:
        """Stop accepting, finish in-flight requests, then flush and checkpoint every log. `controlled=False`
        (a start that failed: nothing was served) skips the controlled shutdown, as Kafka's broker exits
        at a fatal start-up error without asking the controller to move leaderships."""
        if self._stopped:
            return
        self._stopped = True
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        if self.observability is not None:
            self.observability.set_shutting_down()
        kraft = self.services.kraft if self.services is not None else None
        if kraft is not None and controlled:
            # Kafka's controlled shutdown: while still serving, the controller moves this broker's
            # leaderships away (clients follow them), then fences it.
            await kraft.controlled_shutdown(self.config["kbroker.shutdown.timeout.ms"] / 1000)
        if self.group_coordinator is not None:
            # Answers JoinGroup/SyncGroup requests still waiting with NOT_COORDINATOR, so the
            # in-flight requests the server waits for below can finish at once.
            self.group_coordinator.shutdown()
        if self.services is not None:
            self.services.transaction_coordinator.shutdown()
            if self.services.share_coordinator is not None:
                self.services.share_coordinator.shutdown()
        if self.server is not None:
            await self.server.stop(self.config["kbroker.shutdown.timeout.ms"] / 1000)
        if kraft is not None:
            await kraft.close()  # stop fetching metadata before the replica manager goes
        if self.controller_server is not None:
            await self.controller_server.stop(self.config["kbroker.shutdown.timeout.ms"] / 1000)
        if self.services is not None and self.services.kraft_controller is not None:
            await self.services.kraft_controller.close()
        if self.observability is not None:
            await self.observability.stop()
        if self.replica_manager is not None:
            # The replica fetchers first, waited for: none may append to a follower log once the logs close.
            await self.replica_manager.replica_fetcher_manager.shutdown()
            self.replica_manager.shutdown()
        if self.log_cleaner is not None:
            # Stop a running clean at its next batch and wait: the logs must not close under it.
            self.log_cleaner.shutdown()
            if self._clean_future is not None:
                try:
                    await self._clean_future
                except Exception:
                    log.exception("Log cleaner failed while stopping")
        if self.log_manager is not None and self.log_manager.started:
            # The clean-shutdown markers record the broker epoch (KIP-966; -1 without a KRaft registration).
            self.log_manager.shutdown(kraft.broker_epoch() if kraft is not None else -1)
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds.clear()
        for d in self._remove_on_shutdown:  # created by a start that failed: nothing of value in it
            shutil.rmtree(d, ignore_errors=True)


def _log_background_failure(fut: asyncio.Future[None]) -> None:
    exc = None if fut.cancelled() else fut.exception()
    if exc is not None:
        # The log has already marked itself offline (KafkaStorageError); say so where operators look.
        log.error("Background log flush failed: %s", exc)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    if os.environ.get("KBROKER_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            pass
    return asyncio.new_event_loop()


async def _serve(config: KafkaConfig, config_file: str | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(signame: str) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:
            log.info("Received %s: shutting down (send it again to exit at once)", signame)
            stop.set()
        else:
            log.warning("Received %s again: exiting without a clean shutdown", signame)
            os._exit(1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)

    broker = Broker(config)
    log.info(
        "Starting kbroker %s (%s) on the %s event loop",
        kbroker.__version__,
        config_file or "no config file: built-in defaults",
        "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio",
    )
    try:
        await broker.start()
    except StartupError as e:
        log.error("%s", e)
        print(f"kbroker: error: {e}", file=sys.stderr)
        # Bounded: a start that failed half-way (a combined node whose controller already runs) must
        # exit, not wait on parts that never started.
        try:
            await asyncio.wait_for(broker.shutdown(controlled=False), timeout=10)
        except Exception:  # TimeoutError included
            log.exception("Stopping after the failed start did not finish; exiting")
        return 1
    assert broker.server is not None
    listening = ", ".join(str(e) for e in broker.server.bound_endpoints)
    if broker.controller_server is not None:
        listening += ", controller on " + ", ".join(str(e) for e in broker.controller_server.bound_endpoints)
    data = ", ".join(str(d) for d in config.log_dirs)
    endpoint = broker.metrics_endpoint
    http = (f", metrics and health on {endpoint}/metrics, {endpoint}/health/live and {endpoint}/health/ready"
            if endpoint is not None else "")
    log.info(
        "kbroker started: node %d, cluster %s, listening on %s%s, data in %s. "
        "Stop it with Ctrl-C or `kill -TERM %d`.",
        config.node_id,
        broker.cluster_id,
        listening,
        http,
        data,
        os.getpid(),
    )
    notify_ready()
    codecache.started()  # the dataclass methods compiled on the way here are kept for the next start
    await stop.wait()
    started = time.monotonic()
    await broker.shutdown()
    log.info("kbroker shut down cleanly in %.1fs", time.monotonic() - started)
    return 0


def notify_ready() -> None:
    """systemd's sd_notify protocol: "READY=1" and this pid as a datagram to the unix socket named by
    $NOTIFY_SOCKET (set by systemd for a `Type=notify` unit, and by `kbroker serve --nodes` for its
    nodes), once the broker serves. Nothing when unset; a failure to send is logged, never fatal."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    address = "\0" + path[1:] if path.startswith("@") else path  # "@name": the abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(f"READY=1\nMAINPID={os.getpid()}".encode(), address)
    except OSError as e:
        log.warning("Cannot notify readiness to NOTIFY_SOCKET=%s: %s", path, e)


def run_broker(config: KafkaConfig, config_file: str | None = None) -> int:
    """Run a broker until SIGTERM/SIGINT; the process exit code."""
    with asyncio.Runner(loop_factory=_new_event_loop) as runner:
        return runner.run(_serve(config, config_file))
