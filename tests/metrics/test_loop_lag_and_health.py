"""The event-loop lag metric rises under a synthetic stall; health answers through start-up and shutdown.

An in-process `Broker` (the same wiring `kbroker serve` runs) on this test's event loop, its HTTP
listener scraped over a real socket from the same loop. The stall is a `time.sleep` on the loop: the
loop cannot run the monitor's timer, nor anything else, until it returns, as with a synchronous fsync
or a long computation in a handler.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kbroker.broker import Broker
from kbroker.config import KafkaConfig
from tests.metrics.scrape import samples, value

STALL_S = 0.6


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return int(head.split(" ", 2)[1]), body


def _config(tmp_path: Path) -> KafkaConfig:
    return KafkaConfig({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                        "kbroker.metrics.listener": "http://127.0.0.1:0"})


def test_loop_lag_rises_under_a_stall(tmp_path: Path) -> None:
    async def main() -> None:
        broker = Broker(_config(tmp_path))
        await broker.start()
        try:
            assert broker.metrics_endpoint is not None
            port = broker.metrics_endpoint.port
            await asyncio.sleep(0.35)  # a few monitor ticks on an idle loop
            before = (await _get(port, "/metrics"))[1]
            slow_before = value(before, "kbroker_eventloop_lag_ms_count") - value(
                before, "kbroker_eventloop_lag_ms_bucket", le="250.0")
            assert value(before, "kbroker_eventloop_lag_ms_count") >= 2
            time.sleep(STALL_S)  # the synthetic stall: the loop runs nothing meanwhile
            await asyncio.sleep(0.25)  # the tick that was due during the stall runs now, late
            after = (await _get(port, "/metrics"))[1]
            slow_after = value(after, "kbroker_eventloop_lag_ms_count") - value(
                after, "kbroker_eventloop_lag_ms_bucket", le="250.0")
            assert slow_after >= slow_before + 1  # the stall is one observation above 250 ms
            assert value(after, "kbroker_eventloop_lag_max_ms") >= (STALL_S - 0.15) * 1000
            assert value(after, "kbroker_eventloop_lag_ms_sum") - value(before, "kbroker_eventloop_lag_ms_sum") \
                >= (STALL_S - 0.15) * 1000
            # The maximum is per scrape window: the next scrape, after a quiet loop, no longer shows it.
            await asyncio.sleep(0.25)
            again = (await _get(port, "/metrics"))[1]
            assert value(again, "kbroker_eventloop_lag_max_ms") < (STALL_S - 0.15) * 1000
        finally:
            await broker.shutdown()

    asyncio.run(main())


def test_health_ready_follows_the_broker_state(tmp_path: Path) -> None:
    async def main() -> None:
        broker = Broker(_config(tmp_path))
        await broker.start()
        assert broker.metrics_endpoint is not None and broker.observability is not None
        port = broker.metrics_endpoint.port
        status, body = await _get(port, "/health/ready")
        assert status == 200 and '"broker_state": "RUNNING"' in body
        assert (await _get(port, "/health/live"))[0] == 200
        text = (await _get(port, "/metrics"))[1]
        assert value(text, "kafka_server_kafkaserver_brokerstate") == 3
        assert ("kafka_server_replicamanager_underreplicatedpartitions", ()) in samples(text)
        # Shutting down: not ready any more (a load balancer stops sending clients), still live.
        broker.observability.set_shutting_down()
        status, body = await _get(port, "/health/ready")
        assert status == 503 and '"broker_state": "SHUTTING_DOWN"' in body
        assert (await _get(port, "/health/live"))[0] == 200
        assert (await _get(port, "/metrics"))[0] == 200
        await broker.shutdown()
        try:
            await _get(port, "/health/live")
            raise AssertionError("the HTTP listener is still open after shutdown")
        except OSError:
            pass

    asyncio.run(main())


def test_before_the_services_exist_ready_is_503_and_metrics_show_starting(tmp_path: Path) -> None:
    """The listener binds first thing (so a taken port refuses the start before anything is written):
    until the logs are loaded and the broker registered it says STARTING."""
    from kbroker.observability import BrokerObservability

    async def main() -> None:
        observability = BrokerObservability(_config(tmp_path))
        endpoint = await observability.bind()
        assert endpoint is not None
        try:
            status, body = await _get(endpoint.port, "/health/ready")
            assert status == 503 and '"broker_state": "STARTING"' in body
            assert (await _get(endpoint.port, "/health/live"))[0] == 200
            text = (await _get(endpoint.port, "/metrics"))[1]
            assert value(text, "kafka_server_kafkaserver_brokerstate") == 1
        finally:
            await observability.stop()
        assert not (tmp_path / "data").exists()

    asyncio.run(main())
