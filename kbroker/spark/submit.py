"""`kbroker spark submit JOB [job options]`: run a PySpark job against kbroker with spark-submit.

Owns finding spark-submit (the one inside the installed pyspark), putting Spark's Kafka connector
on the classpath, and pointing the job at the broker (127.0.0.1:9092 unless --bootstrap says
otherwise). The equivalent plain command, for people who prefer it:

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 path/to/job.py

Connector resolution is deterministic and offline-friendly: Maven resolves the connector's runtime
dependencies once into `<cache>/jars` (a stamp names the coordinate), jars that pyspark already ships
are left out, and the job gets them with `--jars`; later runs need no network at all. Without Maven,
`--packages` is used with Ivy's cache under `<cache>/ivy` (`spark.jars.ivy`). The cache is
`$KBROKER_SPARK_CACHE`, else `.cache/spark` in a source checkout, else `~/.cache/kbroker/spark`.

`kbroker spark generate clickstream ...` produces the sample data of the worked pipelines, and
`kbroker spark jars` prints the resolved connector jars (`spark-submit --jars "$(kbroker spark jars)"`).
Importing this module does not import pyspark (the broker's CLI imports it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kbroker.spark import AVRO_PACKAGE, BOOTSTRAP_CONF, BOOTSTRAP_ENV, CONNECTOR_PACKAGE, DEFAULT_BOOTSTRAP
from kbroker.spark.preflight import PreflightError, check_bootstrap, check_java

PACKAGE_DIR = Path(__file__).resolve().parent
JOBS_DIR = PACKAGE_DIR / "jobs"
# Built-in jobs, by name: `kbroker spark submit clickstream --input clicks ...`.
BUILTIN_JOBS = {
    "pipeline": JOBS_DIR / "pipeline.py",
    "clickstream": JOBS_DIR / "clickstream.py",
    "backfill": JOBS_DIR / "backfill.py",
}

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kbroker</groupId>
  <artifactId>kbroker-spark-connector</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class SparkSetupError(RuntimeError):
    """pyspark or the Kafka connector is missing and cannot be resolved."""


def cache_dir() -> Path:
    env = os.environ.get("KBROKER_SPARK_CACHE")
    if env:
        return Path(env)
    checkout = PACKAGE_DIR.parent.parent
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".cache" / "spark"
    return Path.home() / ".cache" / "kbroker" / "spark"


def spark_home() -> Path:
    """The installed pyspark (it carries bin/spark-submit and jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkSetupError("pyspark is not installed: pip install 'kbroker[spark]' (pyspark==4.2.0)")
    return Path(spec.origin).parent


def _artifact_id(jar_name: str) -> str:
    # "kafka-clients-3.9.2.jar" -> "kafka-clients"; versions carry no '-' in this dependency tree.
    return jar_name[: -len(".jar")].rsplit("-", 1)[0]


def connector_jars(*, refresh: bool = False) -> list[Path] | None:
    """The connector and its runtime dependencies not already in pyspark, resolved with Maven.

    Returns None when Maven is not available (the caller falls back to --packages).
    """
    return package_jars(CONNECTOR_PACKAGE, "jars", refresh=refresh)


def avro_jars(*, refresh: bool = False) -> list[Path] | None:
    """spark-avro (from_avro/to_avro), resolved like the connector into `<cache>/avro-jars`."""
    return package_jars(AVRO_PACKAGE, "avro-jars", refresh=refresh)


def package_jars(package: str, name: str, *, refresh: bool = False) -> list[Path] | None:
    """`package` and its runtime dependencies not already in pyspark, in `<cache>/<name>`."""
    target = cache_dir() / name
    stamp = cache_dir() / f"{name}.stamp"
    if not refresh and stamp.is_file() and stamp.read_text().strip() == package:
        jars = sorted(target.glob("*.jar"))
        if jars:
            return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        return None
    group, artifact, version = package.split(":")
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="resolve-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_POM.format(group=group, artifact=artifact, version=version))
        out = Path(tmp) / "jars"
        cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
        if os.environ.get("KBROKER_M2_REPO"):
            cmd.append(f"-Dmaven.repo.local={os.environ['KBROKER_M2_REPO']}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            # Maven prints its reason on stdout, the JVM's (no JAVA_HOME, bad Java) on stderr: show both.
            reason = (proc.stdout.strip() + "\n" + proc.stderr.strip()).strip() or f"mvn exited {proc.returncode}"
            raise SparkSetupError(f"Maven could not resolve {package}:\n{reason[-3000:]}")
        # Spark's own jars win: a second scala-library or hadoop-client on the classpath only
        # causes trouble, and --packages leaves them out the same way.
        shipped = {_artifact_id(p.name) for p in (spark_home() / "jars").glob("*.jar")}
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for jar in sorted(out.glob("*.jar")):
            if _artifact_id(jar.name) not in shipped:
                shutil.copy2(jar, target / jar.name)
    stamp.write_text(package + "\n")
    return sorted(target.glob("*.jar"))


LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
LOG_LEVEL_ENV = "KBROKER_SPARK_LOG_LEVEL"
_LOG4J2 = """# Written by `kbroker spark submit --log-level {level}`: Spark's start-up logging at {level}.
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def log4j2_config(level: str) -> Path:
    """A log4j2 configuration for the driver JVM with the root logger at `level`.

    Spark's own default (log4j2-defaults.properties) logs INFO until the job calls setLogLevel, i.e.
    some sixty lines of start-up noise before the first line a person wants; this file sets the
    level from the JVM's first line on. Written to the cache directory, one file per level.
    """
    path = cache_dir() / f"log4j2-{level.lower()}.properties"
    text = _LOG4J2.format(level=level.upper())
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def resolve_job(job: str) -> Path:
    if job in BUILTIN_JOBS:
        return BUILTIN_JOBS[job]
    path = Path(job)
    if not path.is_file():
        raise SparkSetupError(
            f"no such job {job!r}: give a .py file or one of {', '.join(sorted(BUILTIN_JOBS))}"
        )
    return path.resolve()


def build_command(
    job: str,
    job_args: Sequence[str],
    *,
    bootstrap: str = DEFAULT_BOOTSTRAP,
    master: str = "local[2]",
    conf: Sequence[str] = (),
    spark_args: Sequence[str] = (),
    use_packages: bool = False,
    log_level: str = "WARN",
    avro: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit argv and environment for one job (with spark-avro too when `avro`)."""
    home = spark_home()
    cmd = [str(home / "bin" / "spark-submit"), "--master", master]
    jars = None if use_packages else connector_jars()
    extra = (None if use_packages else avro_jars()) if avro else []
    if jars and extra is not None:
        cmd += ["--jars", ",".join(str(j) for j in [*jars, *extra])]
    else:
        packages = [CONNECTOR_PACKAGE, AVRO_PACKAGE] if avro else [CONNECTOR_PACKAGE]
        cmd += ["--packages", ",".join(packages), "--conf", f"spark.jars.ivy={cache_dir() / 'ivy'}"]
    python = sys.executable
    cmd += [
        "--conf", f"{BOOTSTRAP_CONF}={bootstrap}",
        "--conf", f"spark.pyspark.python={python}",
        "--conf", f"spark.pyspark.driver.python={python}",
    ]
    # Quiet from the JVM's first line (INFO: Spark's own default profile, all of it). A user's own
    # spark.driver.extraJavaOptions wins, logging included.
    if log_level.upper() != "INFO" and not any(c.startswith("spark.driver.extraJavaOptions=") for c in conf):
        cmd += ["--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile={log4j2_config(log_level).as_uri()}"]
    for item in conf:
        cmd += ["--conf", item]
    cmd += list(spark_args)
    cmd.append(str(resolve_job(job)))
    cmd += list(job_args)
    env = dict(os.environ)
    env["SPARK_HOME"] = str(home)
    env["PYSPARK_PYTHON"] = python
    env[BOOTSTRAP_ENV] = bootstrap
    env[LOG_LEVEL_ENV] = log_level.upper()  # the job's setLogLevel (pipeline.spark_session)
    # Jobs import kbroker.spark on the driver; executors run no Python code of ours (built-in
    # Spark SQL functions only), so nothing needs shipping with --py-files in local or cluster mode.
    root = str(PACKAGE_DIR.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return cmd, env


def _cmd_submit(args: argparse.Namespace) -> int:
    job_args = list(args.job_args)
    if job_args[:1] == ["--"]:
        job_args = job_args[1:]
    try:
        if not args.print_command:
            # Before a JVM starts: a missing Java or a broker that is not there is one line, in seconds.
            check_java()
            if not args.skip_broker_check:
                check_bootstrap(_job_bootstrap(job_args) or args.bootstrap)
        cmd, env = build_command(
            args.job, job_args, bootstrap=args.bootstrap, master=args.master, conf=args.conf or [],
            spark_args=args.spark_arg or [], use_packages=args.packages, log_level=args.log_level,
            avro=args.avro or wants_avro(job_args),
        )
    except (SparkSetupError, PreflightError) as e:
        print(f"kbroker spark: error: {e}", file=sys.stderr)
        return 1
    if args.print_command:
        # Shell-quoted, so the printed line runs when pasted (a --conf with spaces or quotes survives).
        print(shlex.join(cmd))
        return 0
    return subprocess.call(cmd, env=env)


def wants_avro(job_args: Sequence[str]) -> bool:
    """The job decodes Avro (`--format avro`), so spark-avro goes on the classpath too."""
    args = list(job_args)
    return "--format=avro" in args or any(a == "--format" and b == "avro" for a, b in zip(args, args[1:], strict=False))


def _job_bootstrap(job_args: Sequence[str]) -> str | None:
    """The job's own --bootstrap (it wins over kbroker's, see pipeline.bootstrap_servers), if given."""
    for i, arg in enumerate(job_args):
        if arg == "--bootstrap" and i + 1 < len(job_args):
            return job_args[i + 1]
        if arg.startswith("--bootstrap="):
            return arg.split("=", 1)[1]
    return None


def _cmd_jars(args: argparse.Namespace) -> int:
    try:
        jars = connector_jars(refresh=args.refresh)
    except SparkSetupError as e:
        print(f"kbroker spark: error: {e}", file=sys.stderr)
        return 1
    if jars is None:
        print("kbroker spark: error: Maven (mvn) is not on PATH; use --packages "
              f"{CONNECTOR_PACKAGE} instead", file=sys.stderr)
        return 1
    print(",".join(str(j) for j in jars))
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    try:
        import confluent_kafka  # noqa: F401 - the generators produce with it
    except ImportError:
        print("kbroker spark: error: the generators need confluent-kafka: pip install 'kbroker[spark]' "
              "(or pip install confluent-kafka==2.16.1)", file=sys.stderr)
        return 1
    try:
        check_bootstrap(args.bootstrap)
    except PreflightError as e:
        print(f"kbroker spark: error: {e}", file=sys.stderr)
        return 1
    from kbroker.spark import generators

    return generators.main([args.dataset, "--bootstrap", args.bootstrap, *args.gen_args])


def add_cli(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `kbroker spark {submit,generate,jars}` on the kbroker CLI's subparsers."""
    spark = subparsers.add_parser(
        "spark", help="run PySpark jobs against kbroker (spark-submit with the Kafka connector)",
        description="Run PySpark jobs that read kbroker topics through Spark's Kafka source.",
    )
    sub = spark.add_subparsers(dest="spark_command", metavar="SPARK_COMMAND")
    sub.required = True

    p = sub.add_parser(
        "submit", help="spark-submit a job with the Kafka connector",
        description=(
            "spark-submit JOB (a .py file, or a built-in job: " + ", ".join(sorted(BUILTIN_JOBS)) +
            ") with Spark's Kafka connector on the classpath. Everything after JOB goes to the job."
        ),
    )
    p.add_argument("--bootstrap", default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
                   help="broker address the job uses by default (default: %(default)s)")
    p.add_argument("--master", default="local[2]", help="Spark master (default: %(default)s)")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="Spark conf (repeatable)")
    p.add_argument("--spark-arg", action="append", metavar="ARG",
                   help="extra spark-submit argument, e.g. --spark-arg=--driver-memory=2g (repeatable)")
    p.add_argument("--packages", action="store_true",
                   help=f"resolve {CONNECTOR_PACKAGE} with Ivy (--packages) instead of Maven")
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS,
                   default=os.environ.get(LOG_LEVEL_ENV, "WARN").upper(),
                   help=f"Spark's log level on the driver (default: ${LOG_LEVEL_ENV} or WARN; INFO is Spark's full log)")
    p.add_argument("--avro", action="store_true",
                   help=f"put {AVRO_PACKAGE} on the classpath too (automatic with the job option --format avro)")
    p.add_argument("--print-command", action="store_true", help="print the spark-submit command, do not run")
    p.add_argument("--skip-broker-check", action="store_true",
                   help="do not check that the bootstrap servers answer before starting Spark (e.g. when "
                        "only the executors can reach the brokers)")
    p.add_argument("job", metavar="JOB")
    p.add_argument("job_args", nargs=argparse.REMAINDER, metavar="...")
    p.set_defaults(func=_cmd_submit)

    g = sub.add_parser("generate", help="produce sample data for the worked pipelines (confluent-kafka)")
    g.add_argument("--bootstrap", default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP))
    g.add_argument("dataset", choices=["clickstream"])
    g.add_argument("gen_args", nargs=argparse.REMAINDER, metavar="...")
    g.set_defaults(func=_cmd_generate)

    j = sub.add_parser("jars", help="resolve the Kafka connector with Maven and print its jars (comma-separated)")
    j.add_argument("--refresh", action="store_true", help="resolve again even if cached")
    j.set_defaults(func=_cmd_jars)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbroker")
    add_cli(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(["spark", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
