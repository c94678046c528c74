"""The API layer: one module per Kafka API key, each decoding nothing itself.

A handler receives the decoded request object (from `kbroker.protocol`), calls the domain layer
(`kbroker.replica`, `kbroker.cluster`, `kbroker.coord`) and returns the response object (or an
awaitable of it for delayed operations). The dispatcher discovers handler modules by their
`API_KEY` attribute. Must not import `kbroker.net` or touch sockets.
"""
