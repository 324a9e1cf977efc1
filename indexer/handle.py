"""The index this process uses: opening it, replacing it when its files go wrong, backing off.

What happens when the index fails (docs/reliability.md):

- Before each use, a few stats tell whether the index's files are still the ones this process
  opened (`Index.problem`); if they were deleted, replaced, truncated, or lost their `-wal` /
  `-shm`, the index is replaced by a new one, which must be brought in line with the files
  (`needs_reconcile`) before it is used.
- A damaged database (`IndexBroken`) or one moved under its connection (`IndexMoved`) is replaced
  the same way at its next use.
- An index that cannot be used now (`IndexBusy`, `IndexUnavailable`: locked beyond the busy
  timeout, the disk full, not writable, not openable) is left alone: the call that met the failure,
  and the calls of a short, growing back-off period after it, answer from the session files.
- Each fault is logged once when it starts (and at INFO when it ends), never once per call.

One re-entrant lock guards the handle and its connection; the `Indexer` and the service share it.
A call sets a deadline for its thread (`deadline`): every lock it waits for past it raises IndexBusy,
and the call is answered from the files.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from ccweb_index.indexer.db import Index, file_id, open_handle
from ccweb_index.indexer.errors import (
    IndexBroken,
    IndexBusy,
    IndexFailure,
    IndexMismatch,
    IndexMoved,
    IndexUnavailable,
    translate,
)
from ccweb_index.indexer.faultlog import FaultLog
from ccweb_index.process import OUT_OF_DESCRIPTORS, out_of_descriptors

log = logging.getLogger("ccweb_index")

# After the index failed a call, calls answer from the files for this long, doubling up to the maximum.
BACK_OFF_SECONDS = (1.0, 30.0)
# What a server does while its index cannot be used (the tools' answers come from the files).
ANSWERING_FROM_FILES = "answering from the session files"
# What `watch` does meanwhile: its supervisor re-opens the index once the back-off has passed.
TRYING_AGAIN = "trying again"


class IndexHandle:
    """Owns the open index (or why there is none), its replacement, and the back-off after failures."""

    def __init__(self, path: Path, sessions_dir: str, *, meanwhile: str | None = ANSWERING_FROM_FILES) -> None:
        self.path = path
        self.sessions_dir = sessions_dir
        # What the process does while the index cannot be used, said after each fault; None: it
        # does nothing more (`build`, whose own error says why), and a failed open is not logged.
        self._meanwhile = meanwhile
        # Guards the handle and its connection. It is held for a statement or a commit, never while
        # a file is read or parsed (indexer.refresh), so a call waits at most for one commit.
        self.lock = threading.RLock()
        self._calls = threading.local()  # per thread: the deadline of the call it is answering
        self._index: Index | None = None
        self._reason = "not opened yet"
        self._faults = FaultLog()
        self._retry_at = 0.0  # monotonic time before which calls do not try the index
        self._back_off = 0.0
        # Why an index must be replaced before it is used again, and which: `failed` runs without the
        # lock, and what it says of an index replaced meanwhile must not fall on the new one.
        self._replace: tuple[str, Index] | None = None
        self._faulty = False
        self._needs_reconcile = False  # a replaced index is empty until brought in line
        # The index's directory as it was when the path was resolved (just before this handle was
        # made), then when an index was last open in it: open_handle's `settled_in`. From the start:
        # a directory swapped before a first open that failed was taken (a review).
        self._settled_in = file_id(str(path.parent))

    # --- state ------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._index is not None

    @property
    def reason(self) -> str:
        """Why there is no open index (meaningful while `is_open` is false)."""
        return self._reason

    @property
    def fault(self) -> str | None:
        """The fault in effect (a write or an open failed, and none has succeeded since), or None."""
        return self._faults.active()

    @property
    def needs_reconcile(self) -> bool:
        """The index was (re)opened after a failure and does not reflect the files yet."""
        return self._needs_reconcile

    def reconciled(self) -> None:
        """Every file was compared with the index: it is in line again."""
        self._needs_reconcile = False

    def may_try(self) -> bool:
        """Whether calls may use the index now (no back-off period is running)."""
        return time.monotonic() >= self._retry_at

    def total_changes(self) -> int:
        """Rows written through this connection so far: a call compares it to see whether it wrote.
        Read without the lock, so another thread may have closed the connection (replacing a damaged
        index) meanwhile: it then counts as none, like no index."""
        index = self._index
        if index is None:
            return 0
        try:
            return index.conn.total_changes
        except sqlite3.ProgrammingError:  # closed by a replace under the handle's lock
            return 0

    # --- using it ---------------------------------------------------------------------------------

    def connection(self) -> _Connection:
        """The open connection, under the lock; its sqlite3 errors come out as IndexFailure types."""
        return _Connection(self)

    def held(self, lock: threading.Lock | threading.RLock | None = None) -> _Held:
        """`lock` (by default the handle's), waited for until this thread's deadline (`deadline`):
        IndexBusy after it. Without a deadline, waited for as long as it takes."""
        return _Held(self, self.lock if lock is None else lock)

    def _acquire(self, lock: threading.Lock | threading.RLock) -> None:
        deadline: float | None = getattr(self._calls, "deadline", None)
        if deadline is None:
            lock.acquire()
        elif not lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            raise IndexBusy("another call or the indexing has held the index for too long")

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Within this block, this thread waits for locks (`held`, `connection`) `seconds` in all."""
        self._calls.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._calls.deadline = None

    # --- opening, replacing -----------------------------------------------------------------------

    def open(self) -> bool:
        """Open the index at the path. Under the lock. IndexMismatch is a configuration error."""
        return self._open(None)

    def ready(self) -> None:
        """Make sure the index in use is the one at the path: replace it if its files went wrong, or
        re-open a lost one once the back-off has passed. Under the lock.

        Raises IndexUnavailable when there is no usable index now.
        """
        if self._index is not None:
            marked = self._replace[0] if self._replace is not None and self._replace[1] is self._index else None
            problem = marked or self._index.problem()
            if problem is not None:
                if marked is None:  # else failed() has said it
                    self._faulty = True
                    self._faults.begin(
                        f"the index {self.path}: {problem}; replacing it and rebuilding it from the session files"
                    )
                self._needs_reconcile = True
                self._open(self._index)
        elif self.may_try() and self._open(None):
            self._needs_reconcile = True
        if self._index is None:
            raise IndexUnavailable(self._reason)

    def close(self) -> None:
        with self.lock:
            if self._index is not None:
                self._index.close()
                self._index = None
            self._reason = "closed"

    def _open(self, replacing: Index | None) -> bool:
        # None while the new one opens (it may wait for another process's open, and migrate): a
        # failure about the one replaced, said meanwhile by another thread, is then known as such.
        self._index = None
        try:
            index = open_handle(self.path, self.sessions_dir, replacing=replacing, settled_in=self._settled_in)
        except IndexMismatch as exc:
            if replacing is not None:  # what took the index's place is not ours: this one is done with
                replacing.close()
                self._reason = str(exc)
            raise  # a configuration error (docs/decisions.md): `failed` says it, once
        except (IndexFailure, OSError) as exc:
            self._reason = str(exc)
            self._start_back_off()
            if self._meanwhile is not None:
                self._faults.begin(f"cannot open the index {self.path} ({exc}){self._then()}")
            return False
        self._index = index
        self._replace = None
        self._settled_in = index.directory
        self._faults.end(f"the index {self.path} is open")
        return True

    # --- failing, recovering ----------------------------------------------------------------------

    def worked(self, wrote: bool) -> None:
        """A call was answered from the index. A fault ends only when a write went through (this
        call's or another thread's): a read proves nothing about a lock or a full disk."""
        if self._faulty and wrote:
            self._faulty = False
            self._back_off = 0.0
            self._retry_at = 0.0
            self._faults.end(f"the index {self.path} works again")

    def failed(self, exc: BaseException, *, background: bool = False) -> None:
        """Log what happened (once) and decide what happens next.

        IndexBroken and IndexMoved mark the index for replacement at its next use. Anything else
        starts (or extends) the back-off during which calls answer from the files, unless it happened
        in the background (the watcher's applier, which retries by itself): its retries would keep
        the calls from ever trying the index again.
        """
        index = self._index  # once: without the lock, another thread may be replacing it
        about = exc.about if isinstance(exc, IndexFailure) and exc.about is not None else index
        if about is not index:
            # About an index replaced (or closed) since it failed: what made that happen was said
            # then. Taken for the new one, it replaced a sound index and said so twice (the failed
            # write's thread came here after a call had seen the damage and replaced it).
            return
        self._faulty = True
        message = self._describe(exc)
        if message is not None:
            self._faults.begin(message)
        if isinstance(exc, IndexBroken):
            self._replace = ("it is damaged", index) if index is not None else None
        elif isinstance(exc, IndexMoved):
            self._replace = ("it was deleted or replaced", index) if index is not None else None
        elif not background:
            self._start_back_off()

    def _describe(self, exc: BaseException) -> str | None:
        path = self.path
        if isinstance(exc, (IndexUnavailable, IndexBusy)) and self._index is None:
            return None  # there is no index, which was said when opening it failed
        if isinstance(exc, IndexBusy):
            return f"the index {path} is locked ({exc}){self._then()}"
        if isinstance(exc, IndexBroken):
            return f"the index {path} is damaged ({exc}); rebuilding it from the session files"
        if isinstance(exc, IndexMoved):
            return (
                f"the index {path} was deleted or replaced while in use; replacing it and rebuilding it from the "
                "session files"
            )
        if isinstance(exc, IndexMismatch):  # a configuration error (docs/decisions.md): not ours to rebuild
            return f"the index at {path} is not used: {exc}{self._then()}"
        if isinstance(exc, IndexUnavailable):
            return f"the index {path} cannot be used ({exc}){self._then()}"
        if isinstance(exc, OSError) and exc.errno in OUT_OF_DESCRIPTORS:  # not the directory's fault
            return f"the sessions directory {self.sessions_dir} cannot be read now: {out_of_descriptors(exc.errno)}"
        if isinstance(exc, OSError):  # from the sessions directory itself (files' errors are per file)
            return f"the sessions directory {self.sessions_dir} cannot be read ({exc.strerror or exc})"
        message = f"unexpected {type(exc).__name__} while using the index ({exc}){self._then()}"
        if self._faults.active() != message:
            log.error("%s", message, exc_info=exc)
        return message

    def _then(self) -> str:
        return "" if self._meanwhile is None else f"; {self._meanwhile} until it can be used"

    def _start_back_off(self) -> None:
        self._back_off = min(max(self._back_off * 2, BACK_OFF_SECONDS[0]), BACK_OFF_SECONDS[1])
        self._retry_at = time.monotonic() + self._back_off


# `held` and `connection` are entered several times by every call: as classes rather than
# generator-based context managers, each costs a few attribute look-ups instead of a generator,
# its wrapper and their frames (docs/benchmarks.md, "second pass").


class _Held:
    __slots__ = ("_handle", "_lock")

    def __init__(self, handle: IndexHandle, lock: threading.Lock | threading.RLock) -> None:
        self._handle, self._lock = handle, lock

    def __enter__(self) -> None:
        self._handle._acquire(self._lock)

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _Connection:
    __slots__ = ("_handle", "_index")

    def __init__(self, handle: IndexHandle) -> None:
        self._handle = handle

    def __enter__(self) -> sqlite3.Connection:
        handle = self._handle
        handle._acquire(handle.lock)
        if handle._index is None:
            handle.lock.release()
            raise IndexUnavailable(f"the index is not open ({handle._reason})")
        self._index = handle._index
        return self._index.conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._handle.lock.release()
        if isinstance(exc, sqlite3.Error):
            failure = translate(exc)
            failure.about = self._index
            raise failure from exc
