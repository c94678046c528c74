"""The node's links to the rest of a KRaft cluster (Kafka's `kafka.server` lifecycle pieces).

Owns: the broker's lifecycle with the controller quorum (BrokerRegistration, BrokerHeartbeat, fencing,
controlled shutdown), the channel to the active controller and the forwarding of admin requests to it,
the metadata fetch that feeds the `MetadataLoader` on a broker, and the asyncio driver of the Raft
state machine (`kbroker.raft`). Uses `kbroker.client` for outbound connections.

Sits below the wiring (services.py, broker.py) and above net/ and api/; no domain package imports it
(they see the `Controller` interface and the loader's publishers, not how records arrive).
"""
