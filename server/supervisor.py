"""The supervisor thread: the watcher and the index, kept in order in the background.

Every SUPERVISE_SECONDS it re-checks that the watcher watches the directory the sessions path leads
to now (it may have been deleted and recreated, renamed, replaced by a symlink, or not exist yet)
and starts a new watcher when not, and it re-opens (or replaces) a lost index once its back-off has
passed, so that calls find it ready.
"""

from __future__ import annotations

import logging
import threading

from ccweb_index.indexer.faultlog import FaultLog
from ccweb_index.indexer.files import dir_identity
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.indexer.watch import ErrorHandler, Watcher, start_watcher

log = logging.getLogger("ccweb_index")

# How often the supervisor looks at the directory and the index (a few stats).
SUPERVISE_SECONDS = 0.5


class Supervisor:
    """Owns the watcher. `on_error`: what to do when re-indexing fails in the background."""

    def __init__(self, indexer: Indexer, *, poll: bool, on_error: ErrorHandler) -> None:
        self.indexer = indexer
        self.handle = indexer.handle
        self.watcher: Watcher | None = None
        self._poll = poll
        self._on_error = on_error
        self._lock = indexer.handle.lock
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._directory = FaultLog()

    def start(self) -> None:
        """Start watching (a full reconcile comes with a new watcher), then the thread."""
        with self._lock:
            self.keep_watcher()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="ccweb-index-supervisor", daemon=True)
                self._thread.start()

    def close(self) -> None:
        with self._lock:  # no watcher is started after this
            self._closed = True
            watcher, self.watcher = self.watcher, None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        # Stopped outside the lock: the watcher's applier may be waiting for it.
        if watcher is not None:
            watcher.stop()

    def _run(self) -> None:
        while not self._stop.wait(SUPERVISE_SECONDS):
            try:
                self.keep_watcher()
                self._keep_index()
            except Exception:
                log.exception("the supervisor failed; retrying")

    def _keep_index(self) -> None:
        if not self.handle.may_try() or not self._lock.acquire(blocking=False):
            return
        try:
            if self._closed:
                return
            self.indexer.ready()
        except Exception as exc:
            self.handle.failed(exc, background=True)
        finally:
            self._lock.release()

    def keep_watcher(self) -> None:
        """Watch the directory the sessions path leads to now (a new watcher if it changed)."""
        with self._lock:
            if self._closed:
                return
            identity = dir_identity(self.indexer.sessions_dir)
            current = self.watcher
            if current is not None and current.running and current.watched is not None and current.watched == identity:
                return
            self.watcher = None
        if current is not None:
            current.stop()  # outside the lock: its applier may be waiting for it
        where = self.indexer.sessions_dir
        if identity is None:
            self._directory.begin(
                f"the sessions directory {where} does not exist; answering conversation_not_found and "
                "empty lists until it does"
            )
            return
        if current is not None and current.broke:
            # Its reader failed on its own (said as it stopped); another would likely fail alike.
            log.warning("polling the sessions directory %s from now on", where)
            self._poll = True
        elif current is not None:
            log.warning("the sessions directory %s changed (removed, renamed or replaced); watching it again", where)
        self._directory.end(f"the sessions directory {where} exists again; watching it")
        started: Watcher | None = start_watcher(self.indexer, poll=self._poll, on_error=self._on_error)
        with self._lock:
            if not self._closed and self.watcher is None:
                self.watcher, started = started, None
        if started is not None:
            started.stop()
