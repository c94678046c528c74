"""The metadata image: what the cluster's metadata log says now, and how it changed (Kafka's
`org.apache.kafka.image`).

Owns `MetadataImage` (immutable: topics with their partition registrations, brokers, configs,
features, the next producer id, and the provenance of the last record applied), `MetadataDelta`
(built by replaying metadata records over an image; `apply()` gives the next image and the delta
tells what changed), `MetadataLoader` (turns committed record batches into deltas and images and
tells the publishers in order), the `MetadataPublisher` protocol, `MetadataCache` and the
`MetadataView` lookups the APIs use.

Sans-IO and synchronous: imports only protocol/ (the generated metadata records). Must not import
asyncio, net/, api/, replica/, coord/, cluster/, controller/ or log/.
"""
