"""The network edge: listeners, connections, request framing and the response writer (sendfile).

Owns every socket kbroker opens. Frames requests (4-byte size prefix, exact-size buffers), hands each
one to the API dispatcher and writes the responses back in request order, `FileRegion` parts with
`os.sendfile`. Must not import kbroker.replica, kbroker.log or kbroker.coord: it knows the dispatcher
only through `handle` / `handle_unsupported`, and the protocol only through the frame API.
"""

from kbroker.net.server import KafkaServer, RequestQueueBound

__all__ = ["KafkaServer", "RequestQueueBound"]
