"""A recording TCP proxy for the Kafka protocol, used to make golden captures of real clients.

Owns: accepting client connections, forwarding every byte to an upstream broker (the reference
Apache Kafka) unchanged, and writing each request frame and its response frame (the bytes after
the 4-byte size prefix) to ``<out>/<label>/<seq>-<ApiName>-v<version>.req`` / ``.resp``. It
imports nothing from kbroker: it must record what real clients and Kafka say, not what we think.

Clients learn broker addresses from Metadata/FindCoordinator responses, so the upstream broker
must advertise the proxy's port (``kafka.sh start --advertised-port``); the proxy rewrites nothing.

A connection keeps the label that was current when it was accepted, so a driver can run one client
at a time under its own label. Responses are paired with requests by correlation id per
connection (Produce with acks=0 has no response, so order alone would mispair).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import socket
import struct
import threading
import time
from pathlib import Path

# Kafka 4.3 API key -> name (the message spec names without "Request").
API_NAMES: dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 4: "LeaderAndIsr", 5: "StopReplica",
    6: "UpdateMetadata", 7: "ControlledShutdown", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs",
    33: "AlterConfigs", 34: "AlterReplicaLogDirs", 35: "DescribeLogDirs", 36: "SaslAuthenticate",
    37: "CreatePartitions", 38: "CreateDelegationToken", 39: "RenewDelegationToken",
    40: "ExpireDelegationToken", 41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments", 46: "ListPartitionReassignments",
    47: "OffsetDelete", 48: "DescribeClientQuotas", 49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials", 52: "Vote",
    53: "BeginQuorumEpoch", 54: "EndQuorumEpoch", 55: "DescribeQuorum", 56: "AlterPartition",
    57: "UpdateFeatures", 58: "Envelope", 59: "FetchSnapshot", 60: "DescribeCluster",
    61: "DescribeProducers", 62: "BrokerRegistration", 63: "BrokerHeartbeat", 64: "UnregisterBroker",
    65: "DescribeTransactions", 66: "ListTransactions", 67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 73: "AssignReplicasToDirs",
    74: "ListConfigResources", 75: "DescribeTopicPartitions", 76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge", 80: "AddRaftVoter",
    81: "RemoveRaftVoter", 82: "UpdateRaftVoter", 83: "InitializeShareGroupState",
    84: "ReadShareGroupState", 85: "WriteShareGroupState", 86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary", 88: "StreamsGroupHeartbeat", 89: "StreamsGroupDescribe",
    90: "DescribeShareGroupOffsets", 91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}

_SIZE = struct.Struct(">i")
_REQUEST_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_CORRELATION = struct.Struct(">i")
_MAX_FRAME = 128 * 1024 * 1024


@dataclasses.dataclass
class Exchange:
    """One recorded request and, once it arrives, its response."""

    label: str
    seq: int
    connection: int
    correlation_id: int
    api_key: int
    api_name: str
    api_version: int
    request_file: Path
    request_size: int
    response_file: Path | None = None
    response_size: int | None = None


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"Api{api_key}")


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    """n bytes, or None at a clean end of stream before the first byte."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        read = sock.recv_into(view[got:])
        if read == 0:
            if got == 0:
                return None
            raise ConnectionError(f"stream ended after {got} of {n} bytes")
        got += read
    return bytes(buf)


class CaptureProxy:
    """Threaded recording proxy; `start()` returns the listening port."""

    def __init__(self, out_dir: Path, upstream: tuple[str, int] | None = None, host: str = "127.0.0.1"):
        self.out_dir = out_dir
        self.upstream = upstream
        self.host = host
        self.label = "unlabelled"
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._seq: dict[str, itertools.count[int]] = {}
        self._conn_ids = itertools.count(1)
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._in_flight = 0

    def start(self, port: int = 0) -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, port))
        listener.listen(64)
        self._listener = listener
        thread = threading.Thread(target=self._accept_loop, name="capture-accept", daemon=True)
        thread.start()
        self._threads.append(thread)
        return int(listener.getsockname()[1])

    def open_connections(self) -> int:
        with self._lock:
            return len(self._sockets) // 2

    def wait_quiet(self, timeout: float = 10.0) -> bool:
        """Wait until no connection is open (the client under the current label has gone)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.open_connections() == 0:
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._closing = True
        if self._listener is not None:
            try:
                # close() alone does not wake a thread blocked in accept() on Linux; shutdown does.
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)

    # -- internals ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.upstream is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn_id = next(self._conn_ids)
            label = self.label
            pending: dict[int, Exchange] = {}
            with self._lock:
                self._sockets.update((client, upstream))
            for target, name in ((self._pump_requests, "req"), (self._pump_responses, "resp")):
                thread = threading.Thread(
                    target=target, args=(label, conn_id, client, upstream, pending),
                    name=f"capture-{conn_id}-{name}", daemon=True,
                )
                thread.start()
                self._threads.append(thread)

    def _next_seq(self, label: str) -> int:
        with self._lock:
            counter = self._seq.setdefault(label, itertools.count(1))
            return next(counter)

    def _pump_requests(
        self, label: str, conn_id: int, client: socket.socket, upstream: socket.socket,
        pending: dict[int, Exchange],
    ) -> None:
        directory = self.out_dir / label
        directory.mkdir(parents=True, exist_ok=True)
        try:
            while True:
                head = _read_exact(client, 4)
                if head is None:
                    break
                (size,) = _SIZE.unpack(head)
                if not 8 <= size <= _MAX_FRAME:
                    raise ConnectionError(f"implausible request size {size}")
                frame = _read_exact(client, size)
                assert frame is not None
                api_key, api_version, correlation_id = _REQUEST_PREFIX.unpack_from(frame, 0)
                seq = self._next_seq(label)
                name = api_name(api_key)
                path = directory / f"{seq:04d}-{name}-v{api_version}.req"
                path.write_bytes(frame)
                exchange = Exchange(label, seq, conn_id, correlation_id, api_key, name, api_version, path, size)
                with self._lock:
                    pending[correlation_id] = exchange
                    self.exchanges.append(exchange)
                upstream.sendall(head + frame)
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)

    def _pump_responses(
        self, label: str, conn_id: int, client: socket.socket, upstream: socket.socket,
        pending: dict[int, Exchange],
    ) -> None:
        try:
            while True:
                head = _read_exact(upstream, 4)
                if head is None:
                    break
                (size,) = _SIZE.unpack(head)
                if not 4 <= size <= _MAX_FRAME:
                    raise ConnectionError(f"implausible response size {size}")
                frame = _read_exact(upstream, size)
                assert frame is not None
                (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
                with self._lock:
                    exchange = pending.pop(correlation_id, None)
                if exchange is not None:
                    path = exchange.request_file.with_suffix(".resp")
                    path.write_bytes(frame)
                    exchange.response_file = path
                    exchange.response_size = size
                client.sendall(head + frame)
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)

    def _close_pair(self, client: socket.socket, upstream: socket.socket) -> None:
        for sock in (client, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            if client in self._sockets:
                self._sockets.discard(client)
                self._sockets.discard(upstream)
                client.close()
                upstream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Record Kafka request/response frames passing through.")
    parser.add_argument("--listen", type=int, default=0, help="port to listen on (0: a free one)")
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--out", type=Path, required=True, help="directory for the captures")
    parser.add_argument("--label", default="manual", help="sub-directory for this session's frames")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    proxy = CaptureProxy(args.out, (host, int(port)))
    proxy.label = args.label
    print(f"listening on 127.0.0.1:{proxy.start(args.listen)}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.stop()


if __name__ == "__main__":
    main()
