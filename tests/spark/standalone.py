"""A real Spark standalone cluster for tests: one master and N workers, from the pinned pyspark's own
`bin/spark-class`, on loopback and free ports.

Each daemon is its own JVM (`org.apache.spark.deploy.master.Master`, `...deploy.worker.Worker`), run
in the foreground (what `sbin/start-master.sh` does under `SPARK_NO_DAEMONIZE`), with its log in the
cluster's directory. Each worker has its own cores, memory and work directory, so an application's
executors are separate JVMs launched by separate workers, exactly as on a cluster of machines; only
the network is loopback. The master's REST submission server (a fixed port, 6066) is off, so several
clusters can coexist on one machine.

    cluster = StandaloneCluster(tmp, workers=2, cores=1, memory="768m").start()
    cluster.master_url    # spark://127.0.0.1:PORT
    cluster.stop()

`executor_placement(event_log_dir)` reads Spark's event log (JSON lines) after an application and
returns, per executor id, its worker (from the executor's log URL, which names the worker's UI port)
and the tasks it ran, so a test can show the work really ran on both workers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.broker import free_port


class ClusterError(RuntimeError):
    pass


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class ExecutorPlacement:
    executor_id: str
    host: str
    worker: str  # the worker's UI address, from the executor's log URL: one per worker
    tasks: int = 0
    kafka_tasks: int = 0  # tasks of stages that scan the Kafka source


@dataclass
class StandaloneCluster:
    workdir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "768m"
    daemon_memory: str = "256m"
    _daemons: list[_Daemon] = field(default_factory=list)
    master_port: int = 0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _env(self) -> dict[str, str]:
        from kbroker.spark.submit import spark_home

        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
        })
        return env

    def _spawn(self, name: str, args: list[str]) -> _Daemon:
        from kbroker.spark.submit import spark_home

        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=self._env(), cwd=self.workdir)
        daemon = _Daemon(name, proc, log)
        self._daemons.append(daemon)
        return daemon

    def _wait_for(self, daemon: _Daemon, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = daemon.log.read_text(errors="replace")
            match = re.search(pattern, text)
            if match:
                return match.group(0)
            if daemon.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise ClusterError(f"{daemon.name} did not log {pattern!r} within {timeout}s "
                           f"(exit {daemon.proc.poll()}):\n{daemon.log.read_text(errors='replace')[-4000:]}")

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.master_port = free_port()
        try:
            master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                            "--port", str(self.master_port), "--webui-port", "0"])
            self._wait_for(master, r"I have been elected leader", timeout)
            started = []
            for i in range(self.workers):
                started.append(self._spawn(f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                    "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(self.workdir / f"worker-{i}"), self.master_url]))
            for worker in started:
                self._wait_for(worker, r"Successfully registered with master", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for daemon in reversed(self._daemons):
            if daemon.proc.poll() is None:
                daemon.proc.terminate()
        for daemon in reversed(self._daemons):
            try:
                daemon.proc.wait(20)
            except subprocess.TimeoutExpired:
                daemon.proc.kill()
                daemon.proc.wait(10)
        self._daemons.clear()

    def logs(self) -> str:
        return "\n".join(f"--- {d.name}\n{d.log.read_text(errors='replace')[-3000:]}" for d in self._daemons)


def executor_placement(event_log_dir: Path) -> dict[str, ExecutorPlacement]:
    """Executors of the (single) application logged in `event_log_dir`, with the tasks each ran."""
    # Spark 4 writes a rolling log by default: eventlog_v2_<app>/events_<n>_<app>, plus a status file.
    apps = [p for p in event_log_dir.iterdir() if not p.name.startswith(".")]
    if len(apps) != 1:
        raise AssertionError(f"expected one application's event log in {event_log_dir}, found {sorted(apps)}")
    files = sorted(apps[0].glob("events_*"), key=lambda p: int(p.name.split("_")[1])) if apps[0].is_dir() else apps
    lines = [line for f in files for line in f.read_text().splitlines()]
    executors: dict[str, ExecutorPlacement] = {}
    kafka_stages: set[int] = set()
    for line in lines:
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerExecutorAdded":
            info = event["Executor Info"]
            url = next(iter(info.get("Log Urls", {}).values()), "")
            worker = re.sub(r"^(https?://[^/]+)/.*$", r"\1", url)
            executors[event["Executor ID"]] = ExecutorPlacement(event["Executor ID"], info["Host"], worker)
        elif kind == "SparkListenerStageSubmitted":
            stage = event["Stage Info"]
            # The Kafka source's RDD is named "kafka" in a batch read; a stream's is a MicroBatchScan
            # (the tests' streams have no other source than Kafka).
            if any(rdd.get("Name") == "kafka" or '"MicroBatchScan"' in rdd.get("Scope", "")
                   for rdd in stage.get("RDD Info", [])):
                kafka_stages.add(stage["Stage ID"])
        elif kind == "SparkListenerTaskEnd":
            executor = executors.get(event["Task Info"]["Executor ID"])
            if executor is not None:
                executor.tasks += 1
                if event["Stage ID"] in kafka_stages:
                    executor.kafka_tasks += 1
    return executors
