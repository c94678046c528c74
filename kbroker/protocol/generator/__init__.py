"""Code generator: Kafka's JSON specs -> ``kbroker/protocol/{messages,metadata_records,coordinator_records}/``.

Owns spec loading (a directory or a Kafka jar: kafka-clients, kafka-metadata, the coordinator jars),
the snake_case naming rules and the code emitter. Run with ``python -m kbroker.protocol.generator``
(``make generate``). Imports only the standard library and ``kbroker.protocol.generator`` itself: it
must run even when the generated packages are broken.
"""
