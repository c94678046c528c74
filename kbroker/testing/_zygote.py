"""The broker zygote: one pre-imported Python process that forks a fresh broker per request.

Why: a new `python -m kbroker serve` spends most of its start (0.5 s or more on a busy machine)
importing kbroker and its generated codecs; the broker itself starts in tens of milliseconds. The
zygote (started once per test process, `python -m kbroker.testing._zygote FD`) imports everything,
then waits on a Unix socket for "start a broker" requests. Each request carries a control socket
(passed with SCM_RIGHTS); the zygote forks, and the child runs one broker on that socket:

    child -> parent   {"event": "ready", "bootstrap": "127.0.0.1:PORT", "cluster_id": ..., "pid": ...}
                      {"event": "error", "message": "..."}          (the start failed; the child exits 1)
    parent -> child   {"cmd": "create_topics", "topics": [[name, partitions, {config}], ...]}
    child -> parent   {"event": "created", "errors": {name: message}}
    parent -> child   {"cmd": "stop"}, EOF (the parent is gone) or SIGTERM: clean shutdown, then
    child -> parent   {"event": "stopped"} and the child exits.

The zygote is single-threaded and never creates an event loop before forking (fork is safe), ignores
SIGCHLD so its children are reaped, and exits when its request socket reaches EOF (the parent is
gone). It runs in its own session, so a Ctrl-C in the terminal reaches the test runner only, which
stops its brokers through their control sockets. POSIX only (like the broker's `fcntl` lock).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import time
from typing import Any

# Imported here, before any fork, so a broker child starts without importing anything.
import kbroker.api.dispatcher  # noqa: F401  (its handlers come with _preload_codecs)
import kbroker.services  # noqa: F401
from kbroker.broker import Broker, StartupError, _new_event_loop
from kbroker.cli import setup_logging
from kbroker.client import NodeConnection
from kbroker.config import ConfigError, KafkaConfig
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse

_CREATE_TOPICS = 19


def _preload_codecs() -> None:
    """Decode-table warm-up: import every generated message module and every API handler, which a node
    imports lazily (at the first request of its API), so that no forked broker imports them again."""
    import importlib
    import pkgutil

    import kbroker.protocol.messages as messages
    from kbroker.api.handler_index import HANDLERS

    for info in pkgutil.iter_modules(messages.__path__):
        importlib.import_module(f"{messages.__name__}.{info.name}")
    for row in HANDLERS:
        importlib.import_module(f"kbroker.api.{row[1]}")


async def _create_topics(
    bootstrap: tuple[str, int], topics: list[tuple[str, int, dict[str, str]]]
) -> dict[str, str]:
    """CreateTopics against our own listener (the path a client takes); topic -> error message."""
    if not topics:
        return {}
    conn = NodeConnection(bootstrap[0], bootstrap[1], client_id="kbroker-testing")
    await conn.connect()
    try:
        t = CreateTopicsRequest.CreatableTopic
        c = CreateTopicsRequest.CreatableTopicConfig
        request = CreateTopicsRequest(
            topics=[
                t(name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
                  configs=[c(name=k, value=v) for k, v in configs.items()])
                for name, partitions, configs in topics
            ],
            timeout_ms=30_000,
            validate_only=False,
        )
        response = await conn.request(_CREATE_TOPICS, request, CreateTopicsResponse)
    finally:
        await conn.close()
    errors: dict[str, str] = {}
    for result in response.topics:
        if result.error_code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS is fine for "make sure it exists"
            errors[result.name] = result.error_message or f"error code {result.error_code}"
    return errors


async def _run_broker(ctl: socket.socket, request: dict[str, Any]) -> int:
    reader, writer = await asyncio.open_unix_connection(sock=ctl)
    stop = asyncio.Event()
    # SIGTERM is a clean shutdown too, as for `kbroker serve` (installed before anything can be signalled).
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    def send(message: dict[str, Any]) -> None:
        writer.write(json.dumps(message).encode() + b"\n")

    try:
        config = KafkaConfig.load(None, request["overrides"])
    except (ConfigError, ValueError) as e:
        send({"event": "error", "message": str(e)})
        await writer.drain()
        return 1
    broker = Broker(config)
    try:
        await broker.start()
    except StartupError as e:
        await broker.shutdown()
        send({"event": "error", "message": str(e)})
        await writer.drain()
        return 1
    assert broker.server is not None
    endpoint = broker.server.bound_endpoints[0]
    host = endpoint.host or "127.0.0.1"
    errors = await _create_topics((host, endpoint.port), [tuple(t) for t in request["topics"]])  # type: ignore[misc]
    if errors:
        await broker.shutdown()
        send({"event": "error", "message": f"cannot create topics: {errors}"})
        await writer.drain()
        return 1
    logging.getLogger("kbroker.testing").info(
        "kbroker started: node %d, cluster %s, listening on %s, data in %s (embedded: stops when its test "
        "process closes its control socket)", config.node_id, broker.cluster_id,
        ", ".join(str(e) for e in broker.server.bound_endpoints), ", ".join(str(d) for d in config.log_dirs))
    send({"event": "ready", "bootstrap": f"{host}:{endpoint.port}", "cluster_id": broker.cluster_id,
          "pid": os.getpid(), "listeners": [str(e) for e in broker.server.bound_endpoints]})
    await writer.drain()
    async def commands() -> None:
        while True:
            line = await reader.readline()
            if not line:
                break  # EOF: the parent is gone (or closed us): stop
            command = json.loads(line)
            if command.get("cmd") == "stop":
                break
            if command.get("cmd") == "create_topics":
                try:
                    errors = await _create_topics((host, endpoint.port), [tuple(t) for t in command["topics"]])  # type: ignore[misc]
                except Exception as e:  # reported, never fatal to the broker
                    errors = {"*": str(e)}
                send({"event": "created", "errors": errors})
                await writer.drain()
        stop.set()

    reading = asyncio.create_task(commands())
    await stop.wait()
    reading.cancel()
    started = time.monotonic()
    await broker.shutdown()
    logging.getLogger("kbroker.testing").info("kbroker shut down cleanly in %.3fs", time.monotonic() - started)
    try:
        send({"event": "stopped"})
        await writer.drain()
    except OSError:
        pass
    return 0


def _child(ctl: socket.socket, request: dict[str, Any]) -> None:
    """In the forked child: stdio to the broker's log file, run the broker, exit without cleanup."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log_fd = os.open(request["log_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        setup_logging(request.get("log_level", "INFO"), json_lines=bool(request.get("json_logs")))
        logging.getLogger("kbroker.testing").info(
            "Embedded kbroker %s starting (pid %d)", kbroker.__version__, os.getpid())
        with asyncio.Runner(loop_factory=_new_event_loop) as runner:
            code = runner.run(_run_broker(ctl, request))
    except BaseException:
        logging.getLogger("kbroker.testing").exception("Embedded broker failed")
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("EOF in a request")
        buf += chunk
    return bytes(buf)


def main(fd: int) -> None:
    requests = socket.socket(fileno=fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _preload_codecs()
    requests.sendall(b"R")  # ready for requests
    while True:
        # One request: a 4-byte length (the control socket rides on its first byte), then JSON.
        try:
            head, fds, _flags, _addr = socket.recv_fds(requests, 4, 1)
            while head and len(head) < 4:
                more = requests.recv(4 - len(head))
                if not more:
                    return
                head += more
            if len(head) < 4 or not fds:
                return  # EOF: the parent process is gone
            data = _recv_exactly(requests, int.from_bytes(head, "big"))
        except OSError:
            return
        ctl = socket.socket(fileno=fds[0])
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            requests.close()
            _child(ctl, request)
        ctl.close()
        requests.sendall(json.dumps({"pid": pid}).encode() + b"\n")


import kbroker  # noqa: E402  (for the version in the child's first line)

if __name__ == "__main__":
    main(int(sys.argv[1]))
