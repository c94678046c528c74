"""A test job (spark-submit'ed by test_spark_sasl_ssl.py): Spark's own Kafka source over SASL_SSL.

argv: the SASL_SSL bootstrap, the topic, a JSON object of the security options (`kafka.`-prefixed,
as a user passes them: protocol, mechanism, JAAS line, truststore location/password/type), the
wrong JAAS line for the negative read, and the path the JSON result goes to:
`{"rows": [{partition, offset, value}], "wrong_password": {"error": ..., "seconds": ...}}`.
Only Spark's Kafka source (spark-sql-kafka-0-10 and its Java client) talks to the broker here.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from pyspark.sql import SparkSession


def main() -> None:
    bootstrap, topic, security_json, wrong_jaas, out_path = sys.argv[1:6]
    security: dict[str, str] = json.loads(security_json)
    spark = SparkSession.builder.appName("kbroker-spark-sasl-ssl").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    def read(opts: dict[str, str]) -> list[dict[str, Any]]:
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).options(**opts)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest").load())
        got = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect()
        return [r.asDict() for r in got]

    result: dict[str, Any] = {"rows": read(security)}
    # A wrong password: the batch read fails (Kafka's SaslAuthenticationException), it does not hang.
    started = time.monotonic()
    try:
        rows = read({**security, "kafka.sasl.jaas.config": wrong_jaas, "kafka.default.api.timeout.ms": "20000",
                     "kafka.request.timeout.ms": "10000", "fetchOffset.numRetries": "1"})
        result["wrong_password"] = {"error": None, "rows": len(rows)}
    except Exception as e:  # noqa: BLE001 - the failure is the result the test asserts on
        result["wrong_password"] = {"error": f"{type(e).__name__}: {e}"[:4000]}
    result["wrong_password"]["seconds"] = round(time.monotonic() - started, 1)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    spark.stop()


if __name__ == "__main__":
    main()
