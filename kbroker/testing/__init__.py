"""kbroker.testing: a real Kafka-compatible broker for test suites, no JVM and no Docker.

Owns the public embedding API (`KafkaBroker`, `start_broker`, `TopicSpec`, kbroker.testing.embedded),
the broker zygote that forks brokers quickly (kbroker.testing._zygote) and the pytest plugin
(kbroker.testing.pytest_plugin, registered through the `pytest11` entry point as `kbroker`).

It sits at the top of the layers, beside kbroker.cli: it may import the wiring (kbroker.broker), and
nothing in kbroker imports it. Importing this package imports no broker code: the zygote does that
in its own process.
"""

from kbroker.testing.embedded import BrokerStartError, KafkaBroker, TopicSpec, start_broker

__all__ = ["BrokerStartError", "KafkaBroker", "TopicSpec", "start_broker"]
