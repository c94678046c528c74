"""`kbroker.client.NodeConnection` against a real kbroker process: version negotiation, pipelining,
failure of requests in flight when the peer goes away."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kbroker.client import ConnectionClosedError, NodeConnection
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.support.broker import KBroker

pytestmark = pytest.mark.interop


def test_negotiates_and_pipelines(tmp_path: Path) -> None:
    broker = KBroker(tmp_path)
    broker.start()
    host, _, port = broker.bootstrap.rpartition(":")

    async def run() -> None:
        conn = NodeConnection(host, int(port))
        await conn.connect()
        assert conn.version_for(3) == conn.api_versions[3][1]
        answers = await asyncio.gather(*(conn.request(3, MetadataRequest(topics=None), MetadataResponse) for _ in range(20)))
        assert all(a.cluster_id for a in answers) and len(answers) == 20
        broker.stop()
        with pytest.raises(ConnectionClosedError):
            for _ in range(50):
                await conn.request(3, MetadataRequest(topics=None), MetadataResponse)
                await asyncio.sleep(0.1)
        await conn.close()

    try:
        asyncio.run(run())
    finally:
        broker.stop()


def test_connect_refused_is_connection_closed() -> None:
    async def run() -> None:
        with pytest.raises(ConnectionClosedError):
            await NodeConnection("127.0.0.1", 1, connect_timeout_s=2).connect()

    asyncio.run(run())
