"""Code generator: Kafka's JSON message specs -> ``kbroker/protocol/messages/``.

Owns spec loading (a directory or a kafka-clients jar), the snake_case naming rules and the code
emitter. Run with ``python -m kbroker.protocol.generator --specs DIR``. Imports only the standard
library and ``kbroker.protocol.generator`` itself: it must run even when ``messages/`` is broken.
"""
