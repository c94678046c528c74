"""kbroker's single node picks its implicit CONTROLLER listener port (`KafkaConfig.with_implicit_quorum`)
and holds it from that moment: the socket stays bound and listening and the controller's `KafkaServer`
serves on that very socket. Before, the port was probed, released, and bound again about a second later,
so another process could take it in between (issue 13)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from kbroker.broker import check_listeners_free, socket_server_config
from kbroker.config import KafkaConfig
from kbroker.net.server import KafkaServer


class _NoDispatch:
    async def dispatch(self, *args: object, **kwargs: object) -> None:  # never called: nothing is sent
        raise AssertionError("no request expected")


def test_the_implicit_controller_port_is_held_and_served_on_the_same_socket(tmp_path: Path) -> None:
    config = KafkaConfig({"log.dirs": str(tmp_path)}).with_implicit_quorum()
    held = config.implicit_controller_socket
    assert held is not None
    port = held.getsockname()[1]
    assert f"127.0.0.1:{port}" in ",".join(config["controller.quorum.voters"])
    # Nobody else can take the port now, not even with SO_REUSEADDR.
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
    check_listeners_free(config)  # our own held port is not "in use" for the start-up check

    async def serve() -> None:
        server = KafkaServer(socket_server_config(config, endpoints=config.controller_listeners),
                             _NoDispatch())  # type: ignore[arg-type]
        bound = await server.start()
        try:
            assert [e.port for e in bound] == [port]
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            writer.close()
        finally:
            await server.stop(timeout=1)

    asyncio.run(serve())
    assert held.fileno() == -1  # the server owned it and closed it on stop
