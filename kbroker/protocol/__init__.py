"""Kafka's wire protocol, sans-IO: generated message codecs, headers, frames, record batches, codecs.

Owns every byte format that crosses the wire. Must not import asyncio, sockets, or any other kbroker
package: it is plain synchronous code that unit tests drive directly.
"""
