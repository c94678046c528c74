"""Benchmarks: side-by-side runs against Apache Kafka, micro-benchmarks of the hot paths."""
