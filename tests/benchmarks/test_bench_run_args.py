"""benchmarks/run.py's flags pick the scale: `--p6-records N` sets P6's record count over any scale
(issue 12), the other rows keep theirs, and a count that is not positive is refused; `--p3-generator`
picks P3's instrument (kbench fetch by default, the franz-go consumers on request, or both);
`--p7-generator` P7's (kbench produce-raw by default, kbench produce on request)."""

from __future__ import annotations

import pytest

from benchmarks import cluster_rows
from benchmarks.run import P3_CONSUMER_ROW, SCALES, build_parser, chosen_scale, generators, p3_rows


def _scale(*argv: str) -> dict[str, int]:
    return chosen_scale(build_parser().parse_args(list(argv)))


def test_p6_records_overrides_only_p6() -> None:
    assert _scale() == SCALES["full"]
    assert _scale("--quick")["p6"] == SCALES["quick"]["p6"]
    quick = _scale("--quick", "--p6-records", "1234567")
    assert quick["p6"] == 1_234_567
    assert {k: v for k, v in quick.items() if k != "p6"} == {k: v for k, v in SCALES["quick"].items() if k != "p6"}
    assert _scale("--p6-records", "42")["p6"] == 42
    assert SCALES["full"]["p6"] == 200_000  # the table is not changed by an override


def test_p7_records_overrides_only_p7() -> None:
    longer = _scale("--p7-records", "2000000")
    assert longer["p7"] == 2_000_000
    assert {k: v for k, v in longer.items() if k != "p7"} == {k: v for k, v in SCALES["full"].items() if k != "p7"}
    with pytest.raises(SystemExit):
        _scale("--p7-records", "0")


def test_p6_records_must_be_a_positive_count() -> None:
    with pytest.raises(SystemExit):
        _scale("--p6-records", "0")
    with pytest.raises(SystemExit):
        _scale("--p6-records", "many")


def test_p3_runs_kbench_fetch_unless_asked_for_the_consumers() -> None:
    assert build_parser().parse_args([]).p3_generator == "fetch"
    assert p3_rows("fetch") == [("fetch", "P3_consume_backlog")]
    assert p3_rows("consume") == [("consume", "P3_consume_backlog")]
    assert p3_rows("both") == [("fetch", "P3_consume_backlog"), ("consume", P3_CONSUMER_ROW)]
    assert "kbench fetch" in generators("fetch")["P3"]
    assert "kbench consume" in generators("consume")["P3"]
    assert "kbench fetch" in generators("both")["P3"] and "kbench consume" in generators("both")[P3_CONSUMER_ROW]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--p3-generator", "librdkafka"])


def test_p7_runs_kbench_produce_raw_unless_asked_for_the_franz_go_producer() -> None:
    assert build_parser().parse_args([]).p7_generator == "raw"
    assert build_parser().parse_args(["--p7-generator", "produce"]).p7_generator == "produce"
    assert cluster_rows.p7_load("raw") == ("produce-raw", cluster_rows.P7_RAW_LOAD)
    assert cluster_rows.p7_load("produce") == ("produce", cluster_rows.P7_LOAD)
    # The same record size, batch size and acks either way: only the client's work differs.
    for key in ("size", "acks", "batch-bytes"):
        assert cluster_rows.P7_RAW_LOAD[key] == cluster_rows.P7_LOAD[key]
    assert generators("fetch")["P7"].startswith("kbench produce-raw")
    assert generators("fetch", "produce")["P7"].startswith("kbench produce (")
    assert "kbench fetch" in generators("fetch", "produce")["P3"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--p7-generator", "librdkafka"])
    with pytest.raises(ValueError):
        cluster_rows.p7_load("librdkafka")


def test_p7_gives_both_brokers_the_kernels_socket_buffers_unless_asked_for_kafkas(tmp_path) -> None:
    """With Kafka's 102,400-byte socket buffers the one-node row's core idled while the generator refilled
    its one connection, so P7 runs both systems' brokers with -1 (the kernel's autotuning)."""
    assert build_parser().parse_args([]).p7_socket_buffers == "os"
    assert build_parser().parse_args(["--p7-socket-buffers", "kafka"]).p7_socket_buffers == "kafka"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--p7-socket-buffers", "big"])
    os_buffers = cluster_rows.p7_broker_overrides("os")
    assert os_buffers == {"num.partitions": "1", "socket.receive.buffer.bytes": "-1", "socket.send.buffer.bytes": "-1"}
    assert cluster_rows.p7_broker_overrides("kafka") == {"num.partitions": "1"}
    with pytest.raises(ValueError):
        cluster_rows.p7_broker_overrides("big")
    # kbroker's nodes get them on `kbroker serve --nodes N`'s command line (Kafka's through its properties).
    cmd = cluster_rows._LocalNodes(tmp_path, 2, os_buffers).command()
    overrides = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--override"]
    assert {"socket.receive.buffer.bytes=-1", "socket.send.buffer.bytes=-1", "num.partitions=1"} <= set(overrides)
    assert cmd[cmd.index("--nodes") + 1] == "2"
