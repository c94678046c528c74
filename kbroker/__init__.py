"""kbroker: a Kafka-compatible broker written in Python.

Layers (imports point downwards only): cli/broker wiring -> net -> api -> replica/coord -> log -> protocol.
See docs/architecture.md.
"""

__version__ = "0.1.0"
