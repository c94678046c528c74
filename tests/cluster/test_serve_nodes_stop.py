"""`kbroker serve --nodes 3` stopped with SIGTERM stops quickly and cleanly: every node is a voter, so when
they stop together the last ones lose their quorum and no controller can complete their controlled
shutdown; a combined node gives it up once its quorum has had no leader for
`controller.quorum.fetch.timeout.ms` (it used to wait the whole `kbroker.shutdown.timeout.ms`, 30 s).
Every node still shuts down cleanly: exit 0 and each log directory's clean-shutdown marker."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.test_serve_nodes import Served, _alive, _free_range, _serve, _stop


def _tails(data: Path) -> str:
    """The end of each node's log (its traceback, when it exited uncleanly)."""
    return "".join(f"\n--- node {i}:\n" + "".join((data / f"node-{i}" / "server.log").read_text().splitlines(True)[-30:])
                   for i in (1, 2, 3) if (data / f"node-{i}" / "server.log").exists())


def test_serve_three_nodes_stops_within_seconds_and_cleanly(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    port, cport = _free_range(3), _free_range(3)
    data = tmp_path / "data"
    s: Served = _serve(3, data, port, cport)
    try:
        admin = AdminClient({"bootstrap.servers": s.bootstrap})
        admin.create_topics([NewTopic("rf3", 6, 3)])["rf3"].result(60)
        started = time.monotonic()
        code, rest = _stop(s)
        took = time.monotonic() - started
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
    assert code == 0, rest + _tails(data)
    assert took < 15, f"stopping took {took:.1f}s:\n{rest}"
    assert not any(_alive(pid) for _, _, pid in s.nodes.values())
    for i in (1, 2, 3):
        markers = list((data / f"node-{i}").rglob(".kafka_cleanshutdown"))
        assert markers, f"node {i}: no clean-shutdown marker under {data / f'node-{i}'}"
        assert "shut down cleanly" in (data / f"node-{i}" / "server.log").read_text()
