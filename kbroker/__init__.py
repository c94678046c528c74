"""kbroker: a Kafka-compatible broker written in Python.

Layers (imports point downwards only): cli/broker wiring -> net -> api -> replica/coord -> log -> protocol.
See docs/architecture.md.
"""

from kbroker import codecache as _codecache

__version__ = "0.1.0"

_codecache.install()  # before any kbroker dataclass is defined: their methods' code is cached (start time)
