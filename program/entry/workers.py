"""The diagnoses a server runs: a bounded queue in the audit store, and workers that drain it.

The queue is the store's pending sessions (AuditStore.enqueue), so what a server accepted survives
its restart, and the servers of one PostgreSQL database drain one queue (AuditStore.claim_pending).
A question asked and answered in one request waits for a worker's slot instead, and counts in the
queue while it waits. At most `concurrency` diagnoses run at once in a process: one for the
embedded model, whose engine runs one call at a time. A full queue refuses (QueueFull, with the
seconds after which to try again), never drops what it accepted.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

import dspy

from program.entry.api import diagnose
from program.store.audit import AuditStore
from program.store.errors import AuditStoreError
from contracts import Finding
from contracts.record import DiagnosisResult, DiagnosisSession

log = logging.getLogger(__name__)
# How often an idle worker looks for sessions that other servers queued.
POLL_SECONDS = 0.5
# A first guess of one diagnosis's length, until this process has run one; and the most a client is told to wait.
FIRST_GUESS_SECONDS = 20.0
MAX_RETRY_AFTER = 600


class QueueFull(RuntimeError):
    def __init__(self, queued: int, limit: int, retry_after: int):
        super().__init__(f"the diagnosis queue is full ({queued} of {limit} waiting); try again in {retry_after} s")
        self.retry_after = retry_after


class Workers:
    def __init__(self, store: AuditStore, lm: dspy.BaseLM, *, concurrency: int, limit: int,
                 observe: Callable[[DiagnosisResult, float], None] = lambda result, seconds: None):
        self.store, self.lm, self.limit = store, lm, limit
        self.concurrency = concurrency
        self.observe = observe
        self._slots = threading.BoundedSemaphore(concurrency)
        self._admission = threading.Lock()
        self._waiting = 0  # questions asked in a request, waiting for a slot
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._seconds = FIRST_GUESS_SECONDS
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        queued = self.store.count_queued()
        if queued:
            log.info("resuming %d queued session(s)", queued)
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._loop, name=f"diagnosis worker {n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """No new claims; a diagnosis still running after `timeout` is recorded as interrupted by the
        next store that opens once this process has ended."""
        self._stopping.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def queue_length(self) -> int:
        return self.store.count_queued() + self._waiting

    def _refuse_beyond(self, more: int) -> None:
        queued = self.queue_length()
        if queued + more > self.limit:
            wait = math.ceil(self._seconds * (queued + more) / self.concurrency)
            raise QueueFull(queued, self.limit, max(1, min(MAX_RETRY_AFTER, wait)))

    def accept(self, records: list[DiagnosisSession]) -> set[str]:
        """Queue the sessions whose ids are not recorded yet, all of them or none (QueueFull); the
        ids that were queued now."""
        with self._admission:
            known = self.store.recorded(r.session_id for r in records)
            fresh = [r for r in records if r.session_id not in known]
            if fresh:
                self._refuse_beyond(len(fresh))
            queued = {r.session_id for r in fresh if self.store.enqueue(r)}
        self._wake.set()
        return queued

    def diagnose_now(self, question: str, language: str | None) -> DiagnosisResult:
        """One question answered while the caller waits, in its turn for a slot."""
        with self._admission:
            self._refuse_beyond(1)
            self._waiting += 1
        try:
            self._slots.acquire()
        finally:
            with self._admission:
                self._waiting -= 1
        try:
            return self._timed(question, language, None)
        finally:
            self._slots.release()

    def _timed(self, question: str, language: str | None, session_id: str | None) -> DiagnosisResult:
        started = time.perf_counter()
        result = diagnose(question, lm=self.lm, db=self.store, language=language, session_id=session_id)
        seconds = time.perf_counter() - started
        self._seconds = 0.8 * self._seconds + 0.2 * seconds
        self.observe(result, seconds)
        return result

    def _loop(self) -> None:
        while not self._stopping.is_set():
            with self._slots:
                record = self._claim()
                if record is not None:
                    self._run(record)
                    continue
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()

    def _fail(self, record: DiagnosisSession, exc: Exception) -> None:
        """A claimed session whose run raised is recorded failed with the reason: left claimed, it would
        hold a place in the queue for as long as this process lives, and never run."""
        finding = Finding(rule="serve.run_failed", message=f"the diagnosis raised {type(exc).__name__}: {exc}"[:1000])
        try:
            # What the run stored before it raised stays, marked failed.
            current = self.store.get_session(record.session_id) or record
            if current.status in ("completed", "failed", "interrupted"):
                return
            self.store.save_session(current.model_copy(update={"status": "failed", "errors": [*current.errors, finding]}))
        except AuditStoreError as fault:
            log.error("session %s stays claimed: %s", record.session_id, fault)

    def _claim(self) -> DiagnosisSession | None:
        try:
            return self.store.claim_pending()
        except AuditStoreError as exc:
            log.error("cannot claim a queued session: %s", exc)
            return None

    def _run(self, record: DiagnosisSession) -> None:
        try:
            result = self._timed(record.query, record.language, record.session_id)
        except Exception as exc:  # a worker must outlive any one diagnosis; the store's faults included
            log.exception("session %s did not run", record.session_id)
            self._fail(record, exc)
            return
        log.info("session %s: %s", record.session_id, result.verdict)
