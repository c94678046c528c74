"""KRaft snapshot costs on one node: writing a snapshot of the image, its size, and loading the metadata
at start from the newest snapshot + the log after it, against replaying the whole log.

    .venv/bin/python benchmarks/bench_snapshot.py [--topics 2000] [--partitions 5] [--churn 3] [--dir /tmp]

The metadata log is filled through `ClusterMetadataLog.append` (one fsynced batch per operation, as
the controller commits) with what the controller writes: each round creates `--topics` topics of
`--partitions` partitions with a config override, and every round but the last deletes them again
(`--churn` rounds), so the log is `--churn` times the image. The loader replays each batch as it is
committed. Then:

  snapshot write   `ClusterMetadataLog.create_snapshot(image)`: image -> records -> batches -> fsynced file
  full replay      a fresh `ClusterMetadataLog` + `MetadataLoader` replaying the log from offset 0
  snapshot load    the same, starting from the snapshot (`latest_snapshot`) and replaying nothing after it

No broker, no partition logs: only the metadata path is timed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbroker.controller.metadata_log import ClusterMetadataLog, snapshot_provenance  # noqa: E402
from kbroker.metadata.loader import MetadataLoader  # noqa: E402
from kbroker.protocol.metadata_records import (  # noqa: E402
    ConfigRecord,
    FeatureLevelRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)


def _fill(meta_dir: Path, topics: int, partitions: int, churn: int) -> tuple[ClusterMetadataLog, MetadataLoader]:
    log = ClusterMetadataLog(meta_dir, lambda: int(time.time() * 1000))
    loader = MetadataLoader()
    loader.handle_commit([log.append([FeatureLevelRecord(name="metadata.version", feature_level=30),
                                      FeatureLevelRecord(name="group.version", feature_level=1)])])
    for round_ in range(churn):
        ids = []
        for t in range(topics):
            tid = uuid.uuid4()
            ids.append(tid)
            name = f"topic-{t}"
            records: list[object] = [TopicRecord(name=name, topic_id=tid)]
            records += [PartitionRecord(partition_id=p, topic_id=tid, replicas=[1], isr=[1], leader=1,
                                        leader_epoch=0, partition_epoch=0) for p in range(partitions)]
            records.append(ConfigRecord(resource_type=2, resource_name=name, name="retention.ms", value="86400000"))
            loader.handle_commit([log.append(records)])
        if round_ < churn - 1:
            for tid in ids:
                loader.handle_commit([log.append([RemoveTopicRecord(topic_id=tid)])])
    return log, loader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=5)
    ap.add_argument("--churn", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-snapshot-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        log, loader = _fill(root, args.topics, args.partitions, args.churn)
        fill_s = time.perf_counter() - t0
        log_bytes = log.size_in_bytes
        t0 = time.perf_counter()
        path = log.create_snapshot(loader.image)
        write_s = time.perf_counter() - t0
        assert path is not None
        snap_bytes = path.stat().st_size
        image = loader.image
        log.close()

        t0 = time.perf_counter()
        log2 = ClusterMetadataLog(root, lambda: 0)
        full = MetadataLoader()
        for batch in log2.read_all():
            full.handle_commit([batch])
        full_s = time.perf_counter() - t0
        assert full.image == image
        t0 = time.perf_counter()
        chunked = MetadataLoader()
        pending: list = []
        for batch in log2.read_all():
            pending.append(batch)
            if len(pending) >= 1000:
                chunked.handle_commit(pending)
                pending = []
        chunked.handle_commit(pending)
        chunked_s = time.perf_counter() - t0
        assert chunked.image.topics == image.topics

        t0 = time.perf_counter()
        latest = log2.latest_snapshot()
        assert latest is not None
        snapshot_id, contents = latest
        from_snapshot = MetadataLoader()
        from_snapshot.handle_load_snapshot(contents.records, snapshot_provenance(snapshot_id, contents))
        tail = sum(1 for _ in log2.read_all(snapshot_id.offset))
        load_s = time.perf_counter() - t0
        assert tail == 0 and from_snapshot.image.topics == image.topics
        log2.close()
        print(f"topics={args.topics} partitions/topic={args.partitions} churn={args.churn} "
              f"(fill {fill_s:.1f} s, {log2.end_offset} records)")
        print(f"metadata log      {log_bytes / 1e6:8.2f} MB")
        print(f"snapshot          {snap_bytes / 1e6:8.2f} MB   write {write_s:6.2f} s")
        print(f"start: full replay      {full_s:6.2f} s")
        print(f"start: snapshot load    {load_s:6.2f} s")
        print(f"(replay, 1000 batches per delta: {chunked_s:6.2f} s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
