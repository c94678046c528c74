"""Moving a replica between log directories (AlterReplicaLogDirs, KIP-113): Kafka's
``ReplicaManager.alterReplicaLogDirs`` and its ``ReplicaAlterLogDirsThread``, on one node.

What Kafka does, and what this module does the same way: the LogManager opens a *future* log
(``<topic>-<p>.<id>-future``) in the target directory; a fetcher copies the current log into it,
batch by batch with their offsets, epochs and producer state (``append_as_follower``), following the
log start offset; when the future log has caught up with the current log end offset it is swapped
in under the partition's append order and the old directory is deleted. Appends and fetches keep
going to the current log during the copy.

How it runs here: one asyncio task per moving partition copies at most
``replica.fetch.max.bytes`` (1 MiB by default) per step, on the event loop, and yields between steps,
so a large partition never holds the loop. Appends run on the same loop, so the catch-up check and
the swap happen with no append between them: nothing appended is lost or duplicated, and a fetch
sees the current log before the swap and the new one after (same offsets, same bytes). ``step`` is
synchronous and is what the unit tests drive. A move in flight when the broker stops is abandoned
(the LogManager deletes the ``-future`` directory at the next start and keeps the current log):
Kafka resumes it; here the client alters the log dir again.

Errors as Kafka answers them: a path that is not one of ``log.dirs`` is LOG_DIR_NOT_FOUND; an offline
target directory, an offline partition, or any offline directory when a future log would be created
is KAFKA_STORAGE_ERROR; a partition unknown to the metadata is UNKNOWN_TOPIC_OR_PARTITION and a known
one this broker does not host REPLICA_NOT_AVAILABLE (Kafka keeps the target as the partition's
preferred directory for when it is created, and so does this module).

Imports asyncio (it runs the copy tasks); must not import net/ or api/.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kbroker.log.errors import KafkaStorageError
from kbroker.log.manager import LogDirNotFoundError
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: Bytes copied per step (Kafka's ``replica.fetch.max.bytes`` default).
COPY_BYTES_PER_STEP = 1024 * 1024


class ReplicaAlterLogDirsManager:
    """The partitions being moved to another log directory, and the tasks copying them."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._rm = replica_manager
        self._tasks: dict[tuple[str, int], asyncio.Task[None] | None] = {}
        self.copy_bytes_per_step = COPY_BYTES_PER_STEP

    def moving(self) -> list[tuple[str, int]]:
        return list(self._tasks)

    def alter(self, assignments: Mapping[tuple[str, int], str]) -> dict[tuple[str, int], ErrorCode]:
        """Kafka's ``alterReplicaLogDirs``: one error code per partition."""
        results: dict[tuple[str, int], ErrorCode] = {}
        for tp, path in assignments.items():
            try:
                results[tp] = self._alter_one(tp, path)
            except LogDirNotFoundError as e:
                log.warning("Unable to alter log dirs for %s-%d: %s", tp[0], tp[1], e)
                results[tp] = ErrorCode.LOG_DIR_NOT_FOUND
            except KafkaStorageError as e:
                log.warning("Unable to alter log dirs for %s-%d: %s", tp[0], tp[1], e)
                results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            except KafkaError as e:
                log.warning("Unable to alter log dirs for %s-%d: %s", tp[0], tp[1], e)
                results[tp] = ErrorCode(e.error_code)
        return results

    def _alter_one(self, tp: tuple[str, int], path: str) -> ErrorCode:
        lm = self._rm.log_manager
        destination = lm.log_dir_for_path(path)
        if tp in self._rm.offline:
            raise KafkaStorageError(f"Partition {tp[0]}-{tp[1]} is offline")
        current = lm.get_log(*tp)
        hosted = self._rm.get_partition(*tp) is not None or tp in self._rm.followers
        if current is None or not hosted:
            # Kafka: remember the directory for when the partition is created here; a partition
            # unknown to the metadata is UNKNOWN_TOPIC_OR_PARTITION, a known one not hosted here
            # REPLICA_NOT_AVAILABLE (NotLeaderOrFollower mapped for this API's compatibility).
            lm.preferred_log_dirs[tp] = destination
            missing = self._rm.missing_partition_error(*tp)
            if missing == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return ErrorCode.REPLICA_NOT_AVAILABLE
            return missing
        lm.preferred_log_dirs.pop(tp, None)
        future = lm.create_future_log(tp[0], tp[1], destination)
        if future is None:  # already there: a move elsewhere in flight stops (Kafka: futureReplicaDirChanged)
            self.stop(tp)
            return ErrorCode.NONE
        if tp not in self._tasks:
            self._start(tp)
        return ErrorCode.NONE

    def _start(self, tp: tuple[str, int]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._tasks[tp] = None  # no loop (unit tests): the caller drives step()
            return
        self._tasks[tp] = loop.create_task(self._run(tp), name=f"alter-log-dir-{tp[0]}-{tp[1]}")

    async def _run(self, tp: tuple[str, int]) -> None:
        try:
            while not self.step(tp):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a failed move must not take the broker down
            log.exception("The move of %s-%d to another log dir failed; the current log keeps serving", *tp)
            self.stop(tp, cancel=False)

    def step(self, tp: tuple[str, int]) -> bool:
        """Copy one chunk into the future log, or swap it in if it has caught up. True when done."""
        lm = self._rm.log_manager
        current, future = lm.get_log(*tp), lm.future_log(*tp)
        if current is None or future is None or current.offline or future.offline:
            self.stop(tp, cancel=False)
            return True
        # Follow the current log's start (retention, DeleteRecords) and high watermark.
        if current.log_start_offset > future.log_end_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
        future.update_high_watermark(current.high_watermark)
        if current.log_start_offset > future.log_start_offset:
            future.delete_records_before(current.log_start_offset)
        if future.log_end_offset > current.log_end_offset:
            future.truncate_to(current.log_end_offset)
        if future.log_end_offset == current.log_end_offset:
            self._swap(tp)
            return True
        info = current.read(future.log_end_offset, self.copy_bytes_per_step, None, True)
        region = info.region
        if region is None or region.size == 0:
            raise KafkaStorageError(f"nothing to copy at {future.log_end_offset} from {current.dir} "
                                    f"(log end offset {current.log_end_offset})")
        # A copy of the batches (Kafka's alter-log-dirs fetcher copies them too): not a produce/fetch path.
        data = os.pread(region.file.fileno(), region.size, region.position)
        future.append_as_follower(memoryview(data))
        future.update_high_watermark(current.high_watermark)
        return False

    def _swap(self, tp: tuple[str, int]) -> None:
        self._tasks.pop(tp, None)
        new_log = self._rm.log_manager.replace_current_with_future(*tp)
        partition = self._rm.get_partition(*tp)
        if partition is not None:
            partition.log = new_log

    def stop(self, tp: tuple[str, int], *, cancel: bool = True) -> None:
        """Stop moving ``tp`` and drop its future log (a new target, deletion, a failed directory)."""
        task = self._tasks.pop(tp, None)
        if cancel and task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        future = self._rm.log_manager.future_log(*tp)
        if future is not None and not future.offline:
            self._rm.log_manager.abort_future_log(*tp)
        elif future is not None:
            # Its directory failed: nothing can be removed there; forget it.
            self._rm.log_manager.forget_future_log(*tp)

    def shutdown(self) -> None:
        for task in self._tasks.values():
            if task is not None and not task.done():
                task.cancel()
        self._tasks.clear()
