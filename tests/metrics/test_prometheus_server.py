"""A real Prometheus server (Debian's package) scrapes a real broker; PromQL gives the byte rate produced.

Prometheus 2.42 (the binary of Debian bookworm's `prometheus` package, fetched and checksummed by
scripts/system-deps.sh into .cache/prometheus/<version>/) scrapes kbroker's `/metrics` every second.
A producer sends fixed-size records at a steady rate for a few seconds; then
`rate(kafka_server_brokertopicmetrics_bytesin_total{topic=...}[..])`, asked over Prometheus' HTTP
API, must give the byte rate the broker really took in (measured by two direct scrapes around the
same window) and the rate the client sent (its payload, plus the record framing). Every query of the
Grafana dashboard (docs/grafana/kbroker.json) is then run against the same server: each must be valid
PromQL, and every metric it names must be in the scrape.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.metrics.scrape import http_get, metrics_broker, samples, value
from tests.support.broker import free_port

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_VERSION = "2.42.0+ds-5+deb12u1"  # pinned in scripts/system-deps.sh
PROMETHEUS = ROOT / ".cache" / "prometheus" / PROMETHEUS_VERSION / "prometheus"
DASHBOARD = ROOT / "docs" / "grafana" / "kbroker.json"

RECORD = 1000  # bytes of payload per record
RATE = 200  # records per second: 200 kB/s of payload
PRODUCE_S = 8.0


def _query(prom: str, expr: str, at: float | None = None) -> dict[str, object]:
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    status, body = http_get(f"{prom}/api/v1/query?{urlencode(params)}")
    answer = json.loads(body)
    assert status == 200 and answer["status"] == "success", f"{expr}: {body}"
    return answer["data"]  # type: ignore[no-any-return]


def _produce_steadily(bootstrap: str, topic: str, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "compression.type": "none"})
    tick = 0.05
    per_tick = int(RATE * tick)
    payload = b"r" * RECORD
    next_at = time.monotonic()
    while not stop.is_set():
        for _ in range(per_tick):
            producer.produce(topic, value=payload)
        producer.poll(0)
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    assert producer.flush(30) == 0


def test_prometheus_rate_of_bytes_in_matches_what_was_produced(tmp_path: Path) -> None:
    if not PROMETHEUS.exists():
        pytest.skip(f"no Prometheus at {PROMETHEUS}: run scripts/system-deps.sh")
    broker, http = metrics_broker(tmp_path / "kbroker")
    prom_port = free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: kbroker\n    static_configs:\n"
        f"      - targets: ['{http.removeprefix('http://')}']\n")
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if http_get(f"{prom}/-/ready", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.1)
        # Prometheus applies its targets a few seconds after start: wait for its first scrape of kbroker.
        while not _query(prom, 'up{job="kbroker"} == 1')["result"]:
            assert time.monotonic() < deadline + 15, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("prom", num_partitions=1, replication_factor=1)]).values():
            f.result(30)

        stop = threading.Event()
        producer = threading.Thread(target=_produce_steadily, args=(broker.bootstrap, "prom", stop))
        producer.start()
        try:
            time.sleep(2.0)  # steady state, and a couple of scrapes with the topic in them
            t0 = time.time()
            b0 = value(http_get(f"{http}/metrics")[1], "kafka_server_brokertopicmetrics_bytesin_total", topic="prom")
            time.sleep(PRODUCE_S - 2.0)
            t1 = time.time()
            b1 = value(http_get(f"{http}/metrics")[1], "kafka_server_brokertopicmetrics_bytesin_total", topic="prom")
            time.sleep(1.5)  # let Prometheus scrape past t1
        finally:
            stop.set()
            producer.join(60)
        window = int(t1 - t0)
        measured = (b1 - b0) / (t1 - t0)  # what the broker took in over the window, by direct scrapes
        data = _query(prom, f'rate(kafka_server_brokertopicmetrics_bytesin_total{{topic="prom"}}[{window}s])', at=t1)
        result = data["result"]
        assert isinstance(result, list) and len(result) == 1, data
        promql_rate = float(result[0]["value"][1])
        assert result[0]["metric"]["job"] == "kbroker"
        # Prometheus' rate over its own 1 s scrapes against the broker's counter read directly.
        assert abs(promql_rate - measured) / measured < 0.15, (promql_rate, measured)
        # And against what the client sent: its payload rate plus the v2 record and batch framing.
        sent = RATE * RECORD
        assert sent * 0.8 < promql_rate < sent * 1.3, (promql_rate, sent)

        # Every query of the Grafana dashboard is valid PromQL over these series, and every metric
        # it names is in kbroker's scrape.
        text = http_get(f"{http}/metrics")[1]
        scraped = {name for name, _labels in samples(text)} | {f.name for f in text_string_to_metric_families(text)}
        dashboard = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
        assert len(exprs) > 20
        names: set[str] = set()
        for expr in exprs:
            names.update(re.findall(r"\b((?:kafka|kbroker|process)_[a-z0-9_]+)", expr))
            concrete = (expr.replace("$__rate_interval", "5s").replace('"$api"', '"Produce"')
                        .replace("$instance", ".*").replace("$topic", ".*"))
            if concrete.startswith("label_values("):
                metric = concrete[len("label_values("):].split(",")[0]
                concrete = f"count by (job) ({metric})"
            _query(prom, concrete)
        missing = sorted(n for n in names if n not in scraped)
        assert not missing, f"the dashboard queries metrics kbroker does not expose: {missing}"
        # Prometheus itself saw the target up.
        up = _query(prom, 'up{job="kbroker"}')["result"]
        assert isinstance(up, list) and up and up[0]["value"][1] == "1"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        assert broker.stop() == 0, broker.log_text()
