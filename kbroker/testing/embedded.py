"""`KafkaBroker` / `start_broker`: a real kbroker in a background process, for tests and notebooks.

    from kbroker.testing import start_broker

    with start_broker(topics=["orders", TopicSpec("events", partitions=3)], num_partitions=2) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

Each broker is its own process (forked from the zygote, kbroker.testing._zygote, so a start costs
tens of milliseconds once the zygote has imported kbroker), listens on a free loopback port (bound
as port 0, so two test processes never race for one), keeps its data in a temporary directory
(removed on stop unless you pass `data_dir=`), and writes its log to `<data dir>/../kbroker.log`
(`broker.log_text()`). Topics are created before `start()` returns. Config overrides are keyword
arguments with `_` for `.` (`num_partitions=3` is `num.partitions=3`) or a `config=` mapping.

Test-friendly defaults (each overridable): `group.initial.rebalance.delay.ms=0` (a first consumer
joins at once instead of after Kafka's 3 s), `offsets.topic.num.partitions=1` (the first group
creates one `__consumer_offsets` partition, not 50) and `log.initial.task.delay.ms=0`.

`stop()` asks for a clean shutdown (the same as SIGTERM on `kbroker serve`) and waits; if the
process is gone or stuck it is killed. A broker whose test process dies stops itself: it watches its
control socket and shuts down on EOF.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

# Overridable defaults for a broker in a test (see the module docstring).
TEST_DEFAULTS: dict[str, str] = {
    "node.id": "1",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "log.initial.task.delay.ms": "0",
}


class BrokerStartError(RuntimeError):
    """The embedded broker did not start (bad config, unusable data dir, topic creation failed)."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partition count (-1: the broker's `num.partitions`), topic configs."""

    name: str
    partitions: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


TopicLike = str | TopicSpec


def _topic_spec(topic: TopicLike) -> TopicSpec:
    return topic if isinstance(topic, TopicSpec) else TopicSpec(topic)


def config_key(name: str) -> str:
    """A keyword argument's config key: `num_partitions` -> `num.partitions` (Kafka keys have no `_`)."""
    return name.replace("_", ".")


def _config_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


class _Zygote:
    """The per-process zygote (kbroker.testing._zygote): started on first use, asked to fork brokers."""

    _lock = threading.Lock()
    _instance: _Zygote | None = None

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # The zygote imports the same kbroker this process imports, installed or from a checkout.
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kbroker.testing._zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        self.sock.settimeout(60)
        self._replies = self.sock.makefile("rb")
        if self.sock.recv(1) != b"R":
            raise BrokerStartError(f"the kbroker zygote exited with {self.proc.wait()} while starting")
        self.pid = os.getpid()

    @classmethod
    def get(cls) -> _Zygote:
        with cls._lock:
            z = cls._instance
            if z is None or z.pid != os.getpid() or z.proc.poll() is not None:
                z = cls._instance = _Zygote()
            return z

    def fork_broker(self, request: dict[str, object], ctl: socket.socket) -> int:
        payload = json.dumps(request).encode()
        with self._lock:
            socket.send_fds(self.sock, [len(payload).to_bytes(4, "big")], [ctl.fileno()])
            self.sock.sendall(payload)
            line = self._replies.readline()
        if not line:
            raise BrokerStartError(f"the kbroker zygote exited ({self.proc.poll()})")
        return int(json.loads(line)["pid"])


class KafkaBroker:
    """One embedded broker. `start()` returns once it serves and its topics exist; `stop()` is clean."""

    def __init__(
        self,
        topics: Iterable[TopicLike] = (),
        *,
        config: Mapping[str, object] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_level: str = "INFO",
        json_logs: bool = False,
        start_timeout: float = 30.0,
        **overrides: object,
    ) -> None:
        self.topics = [_topic_spec(t) for t in topics]
        props = dict(TEST_DEFAULTS)
        props["listeners"] = f"PLAINTEXT://{host}:0"
        props.update({k: _config_value(v) for k, v in (config or {}).items()})
        props.update({config_key(k): _config_value(v) for k, v in overrides.items()})
        self._own_dir = data_dir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="kbroker-")) if data_dir is None else Path(data_dir)
        if "log.dirs" not in props and "log.dir" not in props:
            props["log.dirs"] = str(self.workdir / "data")
        self.config = props
        self.log_file = self.workdir / "kbroker.log"
        self.log_level = log_level
        self.json_logs = json_logs
        self.start_timeout = start_timeout
        self.bootstrap_servers = ""
        self.cluster_id = ""
        self.pid = 0
        self.listeners: list[str] = []
        self._ctl: socket.socket | None = None
        self._ctl_file: object = None

    # -- lifecycle --

    def start(self) -> KafkaBroker:
        if self._ctl is not None:
            raise BrokerStartError("this broker is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request: dict[str, object] = {
            "overrides": self.config,
            "topics": [[t.name, t.partitions, dict(t.configs)] for t in self.topics],
            "log_file": str(self.log_file),
            "log_level": self.log_level,
            "json_logs": self.json_logs,
        }
        try:
            self.pid = _Zygote.get().fork_broker(request, theirs)
        finally:
            theirs.close()
        ours.settimeout(self.start_timeout)
        self._ctl = ours
        try:
            reply = self._read()
        except OSError as e:  # a timeout: the process may still be alive
            self._kill()
            raise BrokerStartError(f"kbroker did not start ({e}):\n{self.log_text()}") from None
        except ValueError as e:  # EOF: the process is gone
            self._ctl, self.pid = None, 0
            ours.close()
            raise BrokerStartError(f"kbroker did not start ({e}):\n{self.log_text()}") from None
        if reply.get("event") != "ready":
            self._ctl, self.pid = None, 0  # it exits by itself after an error event
            ours.close()
            raise BrokerStartError(f"kbroker did not start: {reply.get('message', reply)}")
        self.bootstrap_servers = str(reply["bootstrap"])
        self.cluster_id = str(reply["cluster_id"])
        self.listeners = [str(x) for x in reply["listeners"]]  # type: ignore[attr-defined]
        return self

    def _read(self) -> dict[str, object]:
        assert self._ctl is not None
        buf = bytearray()
        while not buf.endswith(b"\n"):
            chunk = self._ctl.recv(65536)
            if not chunk:
                raise ValueError("the broker process exited")
            buf += chunk
        message = json.loads(buf)
        assert isinstance(message, dict)
        return message

    def _send(self, message: dict[str, object]) -> None:
        assert self._ctl is not None
        self._ctl.sendall(json.dumps(message).encode() + b"\n")

    def create_topics(self, *topics: TopicLike) -> None:
        """Create topics now (an existing topic is fine); raises BrokerStartError on a refusal."""
        if self._ctl is None:
            raise BrokerStartError("the broker is not running")
        specs = [_topic_spec(t) for t in topics]
        self._send({"cmd": "create_topics", "topics": [[t.name, t.partitions, dict(t.configs)] for t in specs]})
        reply = self._read()
        if reply.get("errors"):
            raise BrokerStartError(f"cannot create topics: {reply['errors']}")

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown (like SIGTERM on `kbroker serve`); kills the process if it does not finish."""
        ctl, self._ctl = self._ctl, None
        if ctl is not None:
            exited = False
            try:
                ctl.settimeout(timeout)
                ctl.sendall(b'{"cmd": "stop"}\n')
                while ctl.recv(65536):  # until the child exits and its end closes
                    pass
                exited = True
            except OSError:
                pass
            finally:
                ctl.close()
            if not exited:
                self._kill()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill(self) -> None:
        """SIGKILL our broker process (only while it may still be alive: its control socket is open)."""
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.pid = 0

    def kill(self) -> None:
        """SIGKILL, nothing flushed (a crash); `start()` again on the same `data_dir` recovers."""
        ctl = self._ctl
        if ctl is None:
            return
        pid, self._ctl = self.pid, None
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        # Wait for the process to be gone (its end of the control socket closes with it): its
        # lock on the data dir is released then.
        try:
            ctl.settimeout(10)
            while ctl.recv(65536):
                pass
        except OSError:
            pass
        finally:
            ctl.close()
        self.pid = 0

    @property
    def running(self) -> bool:
        return self._ctl is not None

    @property
    def host(self) -> str:
        return self.bootstrap_servers.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.rpartition(":")[2])

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap_servers or 'not started'}, data in {self.workdir})"


@contextmanager
def start_broker(topics: Iterable[TopicLike] = (), **kwargs: object) -> Iterator[KafkaBroker]:
    """`with start_broker(["orders"], num_partitions=3) as broker: ...` — started, then stopped cleanly."""
    broker = KafkaBroker(topics, **kwargs)  # type: ignore[arg-type]
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
