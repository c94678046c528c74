"""`kbroker serve` refuses share-group keys that Kafka 4.3.1 refuses at start (GroupCoordinatorConfig's
and ShareGroupConfig's checks and ConfigDef ranges), with Kafka's messages: a unit test of KafkaConfig
and the real process exiting 1 before it creates anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import ConfigError, KafkaConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
G = "group.share."


@pytest.mark.parametrize(("props", "message"), [
    # ShareGroupConfig.validate
    ({G + "record.lock.duration.ms": "10000"},
     "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({G + "record.lock.duration.ms": "59000", G + "max.record.lock.duration.ms": "40000"},
     "group.share.max.record.lock.duration.ms must be greater than or equal to group.share.record.lock.duration.ms"),
    ({G + "delivery.count.limit": "10", G + "max.delivery.count.limit": "6"},
     "group.share.max.delivery.count.limit must be greater than or equal to group.share.delivery.count.limit"),
    ({G + "delivery.count.limit": "2", G + "min.delivery.count.limit": "3"},
     "group.share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"),
    ({G + "partition.max.record.locks": "5000"},
     "group.share.max.partition.max.record.locks must be greater than or equal to "
     "group.share.partition.max.record.locks"),
    ({G + "partition.max.record.locks": "150", G + "min.partition.max.record.locks": "200"},
     "group.share.partition.max.record.locks must be greater than or equal to "
     "group.share.min.partition.max.record.locks"),
    ({G + "max.share.sessions": "100"},
     "group.share.max.share.sessions must be greater than or equal to group.share.max.size"),
    # GroupCoordinatorConfig (share part)
    ({G + "heartbeat.interval.ms": "1000"},
     "group.share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({G + "heartbeat.interval.ms": "20000"},
     "group.share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ({G + "max.heartbeat.interval.ms": "4000"},
     "group.share.max.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({G + "session.timeout.ms": "30000"},
     "group.share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ({G + "session.timeout.ms": "90000"},
     "group.share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ({G + "min.session.timeout.ms": "1000", G + "session.timeout.ms": "5000", G + "heartbeat.interval.ms": "5000"},
     "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
    ({G + "assignment.interval.ms": "20000"},
     "group.share.assignment.interval.ms must be less than or equal to group.share.max.assignment.interval.ms"),
    # ConfigDef ranges (Kafka's `Range.between`)
    ({G + "min.record.lock.duration.ms": "500", G + "record.lock.duration.ms": "500"},
     "Invalid value 500 for configuration group.share.record.lock.duration.ms: Value must be no less than 1000 "
     "and no more than 3600000"),
    ({G + "delivery.count.limit": "1"},
     "Invalid value 1 for configuration group.share.delivery.count.limit: Value must be no less than 2 and no "
     "more than 10"),
    ({G + "max.size": "2000"},
     "Invalid value 2000 for configuration group.share.max.size: Value must be no less than 1 and no more than 1000"),
    ({"share.coordinator.snapshot.update.records.per.snapshot": "501"},
     "Invalid value 501 for configuration share.coordinator.snapshot.update.records.per.snapshot: Value must be "
     "no less than 0 and no more than 500"),
])
def test_share_keys_out_of_bounds_are_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        KafkaConfig(props)
    assert str(raised.value) == message


def test_lowering_the_minimum_allows_a_short_lock_duration() -> None:
    config = KafkaConfig({G + "record.lock.duration.ms": "1000", G + "min.record.lock.duration.ms": "1000"})
    assert config[G + "record.lock.duration.ms"] == 1000
    assert KafkaConfig({})["share.coordinator.snapshot.update.records.per.snapshot"] == 500


def test_serve_exits_1_on_a_lock_duration_below_its_minimum(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "kbroker", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                        "--override", f"{G}record.lock.duration.ms=5000"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert r.returncode == 1, r.stderr
    assert ("kbroker: error: group.share.record.lock.duration.ms must be greater than or equal to "
            "group.share.min.record.lock.duration.ms") in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "data").exists()
