"""Test support: starting brokers (kbroker, the reference Apache Kafka) and running Kafka's Java tools.

Must not be imported by kbroker itself.
"""
