"""The per-partition cost of one Produce request that writes to many partitions, in process.

    .venv/bin/python benchmarks/bench_produce_partitions.py [--partitions 1000] [--requests 200] [--acks 1]

The scaling sweep (bench_sweep.py, its partitions axis) found kbroker slower than Kafka per
partition when each Produce request carries one small batch for each of thousands of partitions:
the cost there is the handler's per-partition path, not the bytes. This benchmark isolates that
path: a real broker's services (build_services: LogManager, ReplicaManager, metrics, quotas) on a
temporary directory, one topic of N partitions, and one Produce request (v9, one batch of one
100-byte record per partition, acks=1 by default) decoded once and handed to the Produce handler
again and again on a uvloop loop, as the dispatcher does (the records are a writable frame view,
patched in place). It reports the handler's CPU time (this thread's, so other jobs on a shared
machine disturb it less than wall time) per partition (median of ``--rounds`` rounds), so the figure includes validation, offset assignment, producer state, the
segment write (page cache, no fsync), metrics and the response object, but not the codec or the
socket. ``--encode`` adds the response encoding (the per-partition response objects' other cost);
``--calls`` counts the function calls (Python and C) of one request per partition instead: a
deterministic figure, independent of the machine's load. ``--instructions`` counts the CPU
instructions per partition in user space, under valgrind's callgrind (Debian's ``valgrind``): the
benchmark runs twice under it, with 2 and 12 requests (and ``--encode``), and the difference is
divided by 10 requests x the partitions, so the set-up cancels out. Also deterministic (two runs of
one tree agree within 0.1%), and unlike the calls it weighs each call's work; it leaves out the
kernel's side of the ``pwrite``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbroker.api import produce  # noqa: E402
from kbroker.api.context import RequestContext  # noqa: E402
from kbroker.config import KafkaConfig  # noqa: E402
from kbroker.protocol import RequestHeader, decode_request_frame, encode_request_frame, encode_response_frame  # noqa: E402
from kbroker.protocol.messages.produce import ProduceRequest  # noqa: E402
from kbroker.protocol.records import SimpleRecord, build_batch  # noqa: E402
from kbroker.services import build_services, shutdown_services  # noqa: E402

TOPIC = "bench-parts"
VERSION = 9


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run_now(coro: Any) -> Any:
    """The controller's operations complete inside their coroutine (no suspension): drive one."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the controller operation suspended")


def produce_request(partitions: int, acks: int, record_bytes: int) -> tuple[RequestHeader, ProduceRequest]:
    """One batch of one record per partition, through the codec as the network layer decodes it
    (writable views into the frame)."""
    batch = bytes(build_batch([SimpleRecord(b"v" * record_bytes, None, int(time.time() * 1000))]))
    body = ProduceRequest(acks=acks, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=batch) for p in range(partitions)])])
    frame = encode_request_frame(RequestHeader(api_key=0, api_version=VERSION, correlation_id=1, client_id="bench"),
                                 body)
    header, request = decode_request_frame(memoryview(bytearray(frame))[4:])
    return header, request


def run(partitions: int, requests: int, rounds: int, acks: int, record_bytes: int, encode: bool,
        directory: str | None, count_calls: bool = False) -> list[float]:
    root = Path(tempfile.mkdtemp(prefix="kbroker-bench-parts-", dir=directory))
    services = build_services(KafkaConfig({"log.dirs": str(root / "logs"), "node.id": "1"}))
    try:
        _run_now(services.controller.create_topic(TOPIC, partitions))
        assert services.replica_manager.get_partition(TOPIC, partitions - 1) is not None
        header, request = produce_request(partitions, acks, record_bytes)
        ctx = RequestContext(client_id="bench")
        loop = new_event_loop()

        views = [pd.records for td in request.topic_data for pd in td.partition_data]
        zero = bytes(8)

        async def one() -> tuple[Any, float]:
            # A producer sends base offset 0 (the log checks it); the last append patched it in place.
            for v in views:
                v[0:8] = zero
            started = time.thread_time()
            out = produce.handle(services, ctx, header, request)
            if inspect.isawaitable(out):
                out = await out
            if encode:
                encode_response_frame(0, VERSION, 1, out)
            return out, time.thread_time() - started

        async def rounds_() -> list[float]:
            await one()  # first touch (segment pages, index mappings) outside the timing
            if count_calls:
                calls = [0]

                def profiler(frame: Any, event: str, arg: Any) -> None:
                    if event in ("call", "c_call"):
                        calls[0] += 1

                sys.setprofile(profiler)
                try:
                    await one()
                finally:
                    sys.setprofile(None)
                return [calls[0] / partitions]
            per_partition = []
            for _ in range(rounds):
                spent = 0.0
                for _ in range(requests):
                    out, took = await one()
                    spent += took
                if acks:
                    errors = {p.error_code for t in out.responses for p in t.partition_responses}
                    assert errors == {0}, errors
                per_partition.append(spent / requests / partitions * 1e6)
            return per_partition

        try:
            return loop.run_until_complete(rounds_())
        finally:
            loop.close()
    finally:
        shutdown_services(services)
        shutil.rmtree(root, ignore_errors=True)


def count_instructions(partitions: int, directory: str | None) -> float:
    """User-space instructions per partition: two runs under callgrind (2 and 12 requests), differenced."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    totals = []
    for requests in (2, 12):
        with tempfile.TemporaryDirectory() as out:
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.out", sys.executable,
                   __file__, "--partitions", str(partitions), "--requests", str(requests), "--rounds", "1", "--encode"]
            if directory:
                cmd += ["--dir", directory]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            raise SystemExit(f"callgrind printed no total:\n{done.stderr[-2000:]}")
        totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / (10 * partitions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=100, help="requests per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--acks", type=int, default=1, choices=(-1, 0, 1))
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--encode", action="store_true", help="also encode the response frame")
    ap.add_argument("--dir", default=None, help="directory for the temporary logs (default: system temp)")
    ap.add_argument("--calls", action="store_true",
                    help="count the function calls (Python and C) of one request instead of timing (deterministic)")
    ap.add_argument("--instructions", action="store_true",
                    help="count the user-space instructions per partition under valgrind's callgrind (deterministic; "
                         "use --partitions 300 or so: valgrind runs the benchmark about 50 times slower)")
    args = ap.parse_args()
    if args.instructions:
        per_partition_ir = count_instructions(args.partitions, args.dir)
        print(f"partitions={args.partitions} acks=1 encode=True: {per_partition_ir:,.0f} instructions/partition "
              "(callgrind, user space)")
        return
    per_partition = run(args.partitions, args.requests, args.rounds, args.acks, args.record_bytes, args.encode,
                        args.dir, args.calls)
    if args.calls:
        print(f"partitions={args.partitions} acks={args.acks}: {per_partition[0]:.1f} calls/partition")
        return
    med = statistics.median(per_partition)
    print(f"partitions={args.partitions} acks={args.acks} record={args.record_bytes} B "
          f"encode={args.encode}: {med:.2f} µs/partition (median of {args.rounds} rounds; "
          f"min {min(per_partition):.2f}, max {max(per_partition):.2f}); "
          f"{med * args.partitions / 1000:.2f} ms/request")


if __name__ == "__main__":
    main()
