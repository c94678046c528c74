"""PySpark jobs that read kbroker topics through Spark's own Kafka source.

Depends on nothing else in kbroker: it talks to the broker only through Spark's Kafka source and
sink, exactly as a user's job would. Must not import kbroker.net, kbroker.log or kbroker.api.
"""
