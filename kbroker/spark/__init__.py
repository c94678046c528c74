"""PySpark jobs that read kbroker topics through Spark's own Kafka source.

Owns the Spark side of kbroker: `kbroker spark submit` (submit.py), the configurable pipeline
(pipeline.py, source.py, sinks.py), batch ranges resolved before a read (ranges.py), checks before
a JVM starts (preflight.py), progress reporting (progress.py), the worked pipelines
(clickstream.py, backfill.py), their sample-data generators (generators.py) and the spark-submit
entry points (jobs/).

Depends on nothing else in kbroker: it talks to the broker only through Spark's Kafka source and
sink (`format("kafka")`) and the Kafka clients they ship, exactly as a user's job would. Must not import kbroker.net, kbroker.log,
kbroker.api or kbroker.replica. Importing this package does not import pyspark.
"""

from __future__ import annotations

# PySpark and the Kafka connector must be the same Spark version: PyPI has pyspark 4.3.0 but
# Maven Central's spark-sql-kafka-0-10 stops at 4.2.0, so both are pinned to 4.2.0.
SPARK_VERSION = "4.2.0"
SCALA_BINARY_VERSION = "2.13"
CONNECTOR_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY_VERSION}:{SPARK_VERSION}"
# Avro payloads: Spark's own spark-avro (from_avro), the same Spark version, resolved like the connector.
AVRO_PACKAGE = f"org.apache.spark:spark-avro_{SCALA_BINARY_VERSION}:{SPARK_VERSION}"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# Jobs started by `kbroker spark submit` find the broker address here (spark conf, then env).
BOOTSTRAP_CONF = "spark.kbroker.bootstrap"
BOOTSTRAP_ENV = "KBROKER_BOOTSTRAP"

__all__ = [
    "AVRO_PACKAGE",
    "BOOTSTRAP_CONF",
    "BOOTSTRAP_ENV",
    "CONNECTOR_PACKAGE",
    "DEFAULT_BOOTSTRAP",
    "SCALA_BINARY_VERSION",
    "SPARK_VERSION",
]
