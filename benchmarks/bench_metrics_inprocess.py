"""The cost of recording metrics on the produce path, measured in one process where machine noise is small.

    .venv/bin/python benchmarks/bench_metrics_inprocess.py [--rounds 5] [--requests 4000]

benchmarks/bench_metrics.py runs the P1/P2 rows against broker processes; on a machine shared with
other jobs their run-to-run spread (tens of percent) hides a cost of a few percent. This benchmark
keeps the same path (the real `Broker`: connection framing, dispatcher, Produce handler, replica
manager, record validation, log append, response) and drives it from a lean pipelined client in the
same process and event loop, with P2's shape: batches of 148 records of 100 B (what
kafka-producer-perf-test sends in P2, 13,514 requests for 2,000,000 records) and acks=1, five
requests in flight, on uvloop as `kbroker serve` runs. It measures the process's CPU time per request with `kbroker.metrics.enable`
false and true, alternating fresh brokers, and reports the medians and their difference.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbroker.broker import Broker  # noqa: E402
from kbroker.config import KafkaConfig  # noqa: E402
from kbroker.protocol import RequestHeader, encode_request_frame  # noqa: E402
from kbroker.protocol.messages.metadata import MetadataRequest  # noqa: E402
from kbroker.protocol.messages.produce import ProduceRequest  # noqa: E402
from kbroker.protocol.records import SimpleRecord, build_batch  # noqa: E402

_SIZE = struct.Struct(">i")
IN_FLIGHT = 5


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def produce_frame(topic: str, records: int, size: int) -> bytes:
    batch = build_batch([SimpleRecord(b"v" * size) for _ in range(records)])
    body = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=bytes(batch))])])
    return encode_request_frame(RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="bench"), body)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (n,) = _SIZE.unpack(await reader.readexactly(4))
    return await reader.readexactly(n)


async def one_round(enabled: bool, requests: int, records: int, size: int) -> float:
    """CPU seconds per Produce request of one fresh broker."""
    with tempfile.TemporaryDirectory(prefix="bench-metrics-inproc-") as d:
        config = KafkaConfig({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": f"{d}/data",
                              "kbroker.metrics.enable": str(enabled).lower(), "num.partitions": "1"})
        broker = Broker(config)
        await broker.start()
        try:
            assert broker.server is not None
            port = broker.server.bound_endpoints[0].port
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Metadata for the topic creates it (auto.create.topics.enable), as a producer's first request does.
            meta = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="bench")],
                                   allow_auto_topic_creation=True)
            writer.write(encode_request_frame(RequestHeader(api_key=3, api_version=12, correlation_id=0,
                                                            client_id="bench"), meta))
            await read_frame(reader)
            frame = produce_frame("bench", records, size)
            for _ in range(20):  # warm-up: the partition is hosted, the first segment exists
                writer.write(frame)
                await read_frame(reader)
            started = time.process_time()
            sent = done = 0
            while done < requests:
                while sent < requests and sent - done < IN_FLIGHT:
                    writer.write(frame)
                    sent += 1
                await read_frame(reader)
                done += 1
            cpu = time.process_time() - started
            writer.close()
            return cpu / requests
        finally:
            await broker.shutdown()


async def toggled(blocks: int, requests: int, records: int, size: int) -> dict[bool, list[float]]:
    """One broker, one connection: blocks of `requests` Produce requests alternately with recording
    switched off (the network layer's and the partition's meters unbound, the loop monitor stopped)
    and on. Same log, same socket, same caches: what differs between blocks is the recording alone."""
    cpu: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="bench-metrics-inproc-") as d:
        config = KafkaConfig({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": f"{d}/data",
                              "kbroker.metrics.enable": "true", "num.partitions": "1"})
        broker = Broker(config)
        await broker.start()
        try:
            assert broker.server is not None and broker.services is not None and broker.observability is not None
            metrics = broker.services.metrics
            rm = broker.services.replica_manager
            monitor = broker.observability.monitor
            assert metrics is not None and monitor is not None
            port = broker.server.bound_endpoints[0].port
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            meta = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="bench")],
                                   allow_auto_topic_creation=True)
            writer.write(encode_request_frame(RequestHeader(api_key=3, api_version=12, correlation_id=0,
                                                            client_id="bench"), meta))
            await read_frame(reader)
            frame = produce_frame("bench", records, size)
            for _ in range(20):
                writer.write(frame)
                await read_frame(reader)
            partition = rm.get_partition("bench", 0)
            assert partition is not None
            stats = partition.topic_stats
            for i in range(blocks):
                for enabled in ((False, True) if i % 2 == 0 else (True, False)):
                    broker.server.metrics = metrics if enabled else None
                    rm.metrics = metrics if enabled else None
                    partition.topic_stats = stats if enabled else None
                    if enabled:
                        monitor.start()
                    else:
                        monitor.stop()
                    started = time.process_time()
                    sent = done = 0
                    while done < requests:
                        while sent < requests and sent - done < IN_FLIGHT:
                            writer.write(frame)
                            sent += 1
                        await read_frame(reader)
                        done += 1
                    cpu[enabled].append((time.process_time() - started) / requests)
            writer.close()
        finally:
            await broker.shutdown()
    return cpu


def isolated_cost_us(repeat: int = 7, number: int = 200_000) -> tuple[float, float]:
    """(on, off) microseconds of the statements one Produce request runs for its metrics, the code of
    net/connection.py and replica/replica_manager.py replayed on real meters: min of `repeat` (timeit's
    advice: the minimum is the least disturbed figure)."""
    import timeit

    from kbroker.metrics.meters import BrokerMetrics

    class Slot:
        __slots__ = ("stats", "received", "dispatched", "local_done", "completed")

    class Part:
        __slots__ = ("topic_stats",)

    metrics = BrokerMetrics({0: "Produce"})
    slot, part = Slot(), Part()
    part.topic_stats = metrics.topic("bench")
    monotonic = time.monotonic

    def on() -> None:
        m = metrics
        received = monotonic()  # already read by the connection either way (last_active)
        if m is not None:
            stats = slot.stats = m.request(0)
            stats.requests[9] += 1
            slot.received = received
            slot.dispatched = received
            slot.local_done = slot.completed = monotonic()
        ts = part.topic_stats
        if ts is not None:
            ts.total_produce_requests += 1
        if ts is not None:
            ts.bytes_in += 15000
            ts.messages_in += 148
        timed = None
        if slot.stats is not None:
            timed = [slot]
        flushed = monotonic()  # already read by the connection either way (last_active)
        if timed is not None:
            sent = monotonic()
            for sl in timed:
                st = sl.stats
                if st is not None:
                    st.record(sl.received, sl.dispatched, sl.local_done, sl.completed, flushed, sent)

    def off() -> None:
        m = None
        received = monotonic()
        if m is not None:
            pass
        ts = None
        if ts is not None:
            pass
        if ts is not None:
            pass
        timed = None
        flushed = monotonic()
        if timed is not None:
            pass
        del received, flushed

    t_on = min(timeit.repeat(on, repeat=repeat, number=number)) / number * 1e6
    t_off = min(timeit.repeat(off, repeat=repeat, number=number)) / number * 1e6
    return t_on, t_off


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--records", type=int, default=148, help="records per batch (P2: 148)")
    ap.add_argument("--size", type=int, default=100, help="bytes per record (P2: 100)")
    ap.add_argument("--isolated", action="store_true",
                    help="only the recording statements of one Produce request, timed on their own")
    ap.add_argument("--toggle", action="store_true",
                    help="one broker, recording switched off and on between blocks of requests")
    a = ap.parse_args()
    if a.isolated:
        t_on, t_off = isolated_cost_us()
        print(f"recording statements of one Produce request: {t_on - t_off:.2f} us "
              f"(on {t_on:.2f} us, off {t_off:.2f} us; min of 7 x 200,000)")
        return 0
    cpu: dict[bool, list[float]] = {False: [], True: []}
    if a.toggle:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            cpu = runner.run(toggled(a.rounds, a.requests, a.records, a.size))
    for i in range(0 if a.toggle else a.rounds):
        for enabled in ((False, True) if i % 2 == 0 else (True, False)):
            with asyncio.Runner(loop_factory=new_event_loop) as runner:  # uvloop, as `kbroker serve` runs
                cpu[enabled].append(runner.run(one_round(enabled, a.requests, a.records, a.size)))
            print(f"round {i + 1}: metrics {'on ' if enabled else 'off'} "
                  f"{cpu[enabled][-1] * 1e6:8.1f} us CPU per request", file=sys.stderr, flush=True)
    off, on = statistics.median(cpu[False]), statistics.median(cpu[True])
    pairs = [(b - a_) / a_ for a_, b in zip(cpu[False], cpu[True], strict=True)]
    lo_off, lo_on = min(cpu[False]), min(cpu[True])
    print(f"CPU per Produce request ({a.records} x {a.size} B, acks=1), {a.rounds} rounds of {a.requests}:\n"
          f"  medians: off {off * 1e6:.1f} us, on {on * 1e6:.1f} us, cost {(on - off) / off:+.2%}\n"
          f"  minima (the least disturbed rounds): off {lo_off * 1e6:.1f} us, on {lo_on * 1e6:.1f} us, "
          f"cost {(lo_on - lo_off) / lo_off:+.2%}\n"
          f"  per-round pairs " + " ".join(f"{p:+.1%}" for p in pairs)
          + f"; median of pairs {statistics.median(pairs):+.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
