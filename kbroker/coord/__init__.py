"""Coordinators: the group coordinator and committed offsets (later: transactions).

Owns group state machines and __consumer_offsets record formats. Must not import kbroker.net
(no socket code) and must not import kbroker.api.
"""
