"""`kbroker storage format` for the tests' cluster set-ups, run in this process.

A cluster fixture formats every node before it starts it; as a subprocess each format is a Python start
plus the import of all of kbroker (about a second on a quiet 2-core machine, 3 s under load), paid once
per node per cluster, for dozens of clusters in the default run. Here `kbroker.cli.main` parses the same
arguments and runs the same storage tool, in the test process (which has imported kbroker already): the
format's output and exit code are the command's. The command line itself (a separate process, `python -m
kbroker storage format`) stays covered where it is the subject: tests/unit/test_cli.py,
tests/snapshot/test_snapshot_java.py, tests/unit/test_first_run.py.
"""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path

from tests.support.broker import KBroker

# redirect_stdout swaps the process-wide sys.stdout: fixtures that format nodes from a thread pool take turns.
_LOCK = threading.Lock()


def kbroker_storage_format(config: Path, cluster_id: str, *extra: str) -> tuple[int, str]:
    """`kbroker storage format -c config -t cluster_id *extra`: (exit code, what it printed; the lines the
    storage tool writes to the stdout it bound at import go to the test's captured output instead)."""
    from kbroker.cli import main

    out = io.StringIO()
    with _LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(["storage", "format", "-c", str(config), "-t", cluster_id, *extra])
        except SystemExit as e:  # argparse refusing the arguments
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue()


def format_node(node: KBroker, cluster_id: str, props: dict[str, str], *extra: str) -> str:
    """Write `props` to the node's format.properties and format its log directories; returns the output."""
    path = node.workdir / "format.properties"
    node.workdir.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    code, out = kbroker_storage_format(path, cluster_id, *extra)
    assert code == 0, out
    return out
