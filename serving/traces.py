"""Persisting traces without slowing replies: a background thread writes them in batches.

`record()` only builds a row and puts it on a queue (microseconds); a daemon
thread bulk-inserts every 200 ms or 200 rows. `flush()` writes what is pending
(tests, shutdown). With TRACE_WRITES=sync rows are written inline instead.
"""

import atexit
import logging
import queue
import threading
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection

from serving.models import Trace

log = logging.getLogger(__name__)
BATCH = 200
INTERVAL_S = 0.2


def trace_row(*, workspace_id: int, data: dict, source: str, harness_id: int | None, version_id: int | None) -> Trace:
    return Trace(
        workspace_id=workspace_id, trace_id=data["trace_id"], source=source, room_id=data["input"]["room_id"],
        viewer_id=data["input"]["viewer_id"][:128], harness_id=harness_id, harness_version_id=version_id,
        arm=data.get("arm", "")[:100], backend=data.get("backend", "")[:50], outcome=data["outcome"],
        silent=data["silent"], message=data["input"]["message"], reply=data["reply"], latency_ms=data["duration_ms"],
        model_calls=data["model_calls"], tokens_in=data["tokens_in"], tokens_out=data["tokens_out"],
        hooks_fired=data["hooks_fired"], data=data, created_at=datetime.fromtimestamp(data["started_at"], UTC),
    )


class TraceWriter:
    def __init__(self):
        self.queue: queue.Queue[Trace] = queue.Queue()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def record(self, row: Trace) -> None:
        if settings.TRACE_WRITES == "sync":
            row.save(force_insert=True)
            return
        self.queue.put(row)
        if self.thread is None or not self.thread.is_alive():
            with self.lock:
                if self.thread is None or not self.thread.is_alive():
                    self.thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
                    self.thread.start()

    def _drain(self, first: Trace | None = None) -> list[Trace]:
        rows = [first] if first is not None else []
        while len(rows) < BATCH:
            try:
                rows.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return rows

    def _write(self, rows: list[Trace]) -> None:
        try:
            if rows:
                Trace.objects.bulk_create(rows, ignore_conflicts=True)
        except Exception:  # a failed batch must not kill the writer; the rows are logged and dropped
            log.exception("could not write %d traces", len(rows))
        finally:
            for _ in rows:
                self.queue.task_done()

    def _run(self) -> None:
        wrote = False
        while True:
            try:
                first = self.queue.get(timeout=INTERVAL_S)
            except queue.Empty:
                if wrote:  # idle: give this thread's connection back rather than hold it open
                    connection.close()
                    wrote = False
                continue
            self._write(self._drain(first))
            wrote = True

    def flush(self) -> None:
        """Return once everything queued so far is written (by the writer thread, or here if it is gone)."""
        if self.thread is not None and self.thread.is_alive():
            self.queue.join()
            return
        while not self.queue.empty():
            self._write(self._drain())


writer = TraceWriter()
atexit.register(writer.flush)
