"""`ControllerRegistrationManager`: a controller registers itself with the active controller (KIP-919).

Kafka's `ControllerRegistrationManager`: every controller (a voter) sends ControllerRegistration (API
70) with its incarnation id, its controller listeners and its supported features to the active
controller, which commits a `RegisterControllerRecord`. The registrations are what an Apache Kafka
controller answers DescribeCluster from on its controller listener (`kafka-metadata-quorum
--bootstrap-controller`): in a mixed quorum a kbroker voter that never registered is missing there, and
while a kbroker voter leads, Kafka's controllers answer `controller_id` -1 and the tool cannot find the
leader. So kbroker's voters register too.

The manager registers once per incarnation (one process run), when the committed image has
`metadata.version` >= 3.7-IV0 (15) and does not hold its registration yet, and again whenever the image
loses it; a failed attempt (no leader, NOT_CONTROLLER, a lost connection) is retried after a backoff.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.client import NodeConnection
from kbroker.client.security import PLAINTEXT_SECURITY, ClientSecurity
from kbroker.metadata.image import MetadataImage
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.controller_registration import (
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
)
from kbroker.raft.config import Endpoint
from kbroker.server.broker_lifecycle import SUPPORTED_FEATURES

log = logging.getLogger(__name__)

CONTROLLER_REGISTRATION = 70
# MetadataVersion.IBP_3_7_IV0: controller registrations exist from this level on.
CONTROLLER_REGISTRATION_METADATA_VERSION = 15
# Kafka's SecurityProtocol ids, for the listeners a registration announces.
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True)
class ControllerInfo:
    node_id: int
    incarnation_id: uuid.UUID
    listeners: tuple[tuple[str, str, int], ...]  # (listener name, host, port)


class ControllerRegistrationManager:
    def __init__(self, info: ControllerInfo, *, image: Callable[[], MetadataImage],
                 leader: Callable[[], Endpoint | None], backoff_s: float = 0.5,
                 security: ClientSecurity | None = None) -> None:
        self.info = info
        # The controller listener's security: both how this voter reaches the active controller and
        # the protocol its registration announces for that listener.
        self.security = security or PLAINTEXT_SECURITY
        self._image = image
        self._leader = leader
        self.backoff_s = backoff_s
        self._task: asyncio.Task[None] | None = None
        self.registered = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-registration")

    def _needs_registration(self) -> bool:
        image = self._image()
        if (image.features.metadata_version or 0) < CONTROLLER_REGISTRATION_METADATA_VERSION:
            return False
        current = image.cluster.controllers.get(self.info.node_id)
        return current is None or current.incarnation_id != self.info.incarnation_id

    def request(self) -> ControllerRegistrationRequest:
        return ControllerRegistrationRequest(
            controller_id=self.info.node_id, incarnation_id=self.info.incarnation_id, zk_migration_ready=False,
            listeners=[ControllerRegistrationRequest.Listener(name=name, host=host, port=port,
                                                              security_protocol=_SECURITY_PROTOCOL_IDS.get(
                                                                  self.security.protocol, 0))
                       for name, host, port in self.info.listeners],
            features=[ControllerRegistrationRequest.Feature(name=f.name, min_supported_version=f.min_version,
                                                            max_supported_version=f.max_version)
                      for f in SUPPORTED_FEATURES])

    async def _send(self, leader: Endpoint) -> bool:
        conn = NodeConnection(leader.host, leader.port, client_id=f"controller-registration-{self.info.node_id}",
                              request_timeout_s=10.0, security=self.security)
        try:
            await conn.connect()
            response = await conn.request(CONTROLLER_REGISTRATION, self.request(), ControllerRegistrationResponse)
        except (TimeoutError, OSError, ConnectionError) as e:
            log.debug("ControllerRegistration to %s:%d failed: %s", leader.host, leader.port, e)
            return False
        finally:
            await conn.close()
        if response.error_code != 0:
            log.info("ControllerRegistration refused by %s:%d: %s %s", leader.host, leader.port,
                     ErrorCode(response.error_code).name, response.error_message or "")
            return False
        log.info("Controller %d registered (incarnation %s) with the active controller at %s:%d",
                 self.info.node_id, self.info.incarnation_id, leader.host, leader.port)
        return True

    async def _run(self) -> None:
        while True:
            if self._needs_registration():
                self.registered = False
                leader = self._leader()
                if leader is not None and await self._send(leader):
                    # Wait for the record to commit before checking again (the image catches up).
                    for _ in range(20):
                        await asyncio.sleep(self.backoff_s)
                        if not self._needs_registration():
                            break
                    continue
            else:
                self.registered = True
            await asyncio.sleep(self.backoff_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
            self._task = None


__all__ = ["ControllerInfo", "ControllerRegistrationManager"]
