"""The network edge: listeners, connections, request framing, the request bounds and the response writer.

Owns every socket kbroker opens. Frames requests (4-byte size prefix, exact-size views of reusable
buffers: `frames`), bounds what is received broker-wide (memory from the size prefix on, request
slots only for complete requests), closes slow senders and idle connections, hands each request to the
API dispatcher and writes the responses back in request order, `FileRegion` parts with `os.sendfile`.

Also owns the HTTP listener for Prometheus and probes (`http_listener`: `/metrics`, `/health/live`,
`/health/ready`) and the event-loop monitor (`loop_monitor`), and records Kafka's RequestMetrics and
socket-server metrics into a `kbroker.metrics.meters.BrokerMetrics` when it is given one.

Must not import kbroker.config, kbroker.replica, kbroker.log or kbroker.coord: it is configured by a
`SocketServerConfig` (built by kbroker.broker), knows the dispatcher only through `handle` /
`handle_unsupported`, the protocol only through the frame API, and the metrics only through their meters.
"""

from kbroker.net.bounds import MemoryPool, RequestQueueBound
from kbroker.net.server import KafkaServer
from kbroker.net.settings import ListenerEndpoint, SocketServerConfig

__all__ = ["KafkaServer", "ListenerEndpoint", "MemoryPool", "RequestQueueBound", "SocketServerConfig"]
