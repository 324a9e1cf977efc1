"""Following the sessions directory, and proving at query time that every change is accounted for.

Two watchers share one interface:

- `InotifyWatcher` reads watchdog's inotify stream (`watchdog.observers.inotify_c.InotifyFD`): one
  kernel queue, events in the order the changes happened, for every watch on it. It watches the
  sessions directory and a private cookie directory elsewhere. `sync()` is Watchman's query cookie:
  create a file in the cookie directory and wait until its event comes back. The kernel queued the
  event of every change that completed before the cookie was created ahead of the cookie, so once
  the cookie is seen, every such change has reached the dirty set. The cookie never touches the
  sessions directory. (watchdog's `Observer` hands each watch to its own emitter thread, which
  reorders events across watches; that is why the raw stream is used here.)
- `PollingWatcher` uses watchdog's `PollingObserver` for filesystems without inotify (`--poll`).
  Polling cannot prove it has seen everything up to now, so its `sync()` always answers False and
  the caller falls back to checking the files itself.

Both hand changed session ids to an applier thread, which coalesces bursts and re-indexes them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Protocol

from indexer.refresh import Indexer
from indexer.sessionfile import session_id_from_name

log = logging.getLogger("ccweb_index")

COALESCE_SECONDS = 0.005
SYNC_TIMEOUT_SECONDS = 2.0


def _cookie_parent() -> str | None:
    """A memory filesystem if there is one: a cookie is created and removed on every synced call."""
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None  # the system's temporary directory


class Watcher(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def sync(self) -> bool: ...
    @property
    def running(self) -> bool: ...


class _DirtySet:
    """Session ids seen changing and not yet re-indexed, plus an overflow flag (events were lost)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ids: set[str] = set()
        self._overflow = False
        # When the oldest change not yet applied was seen: the watcher's lag is the age of this.
        self.oldest_pending_at: float | None = None

    def add(self, session_id: str) -> None:
        with self._cond:
            self._ids.add(session_id)
            if self.oldest_pending_at is None:
                self.oldest_pending_at = time.monotonic()
            self._cond.notify_all()

    def overflow(self) -> None:
        with self._cond:
            self._overflow = True
            if self.oldest_pending_at is None:
                self.oldest_pending_at = time.monotonic()
            self._cond.notify_all()

    def take(self) -> tuple[set[str], bool]:
        with self._cond:
            ids, overflow = self._ids, self._overflow
            self._ids, self._overflow, self.oldest_pending_at = set(), False, None
            return ids, overflow

    def lag(self) -> tuple[float, int]:
        """(seconds since the oldest change not yet taken for re-indexing, changes pending)."""
        with self._cond:
            since = self.oldest_pending_at
            return (0.0 if since is None else time.monotonic() - since), len(self._ids)

    def wait(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._ids or self._overflow, timeout)

    def __len__(self) -> int:
        with self._cond:
            return len(self._ids)


class _Applier(threading.Thread):
    """Re-indexes what the watcher saw change, a burst at a time."""

    def __init__(self, indexer: Indexer, dirty: _DirtySet) -> None:
        super().__init__(name="ccweb-index-applier", daemon=True)
        self.indexer = indexer
        self.dirty = dirty
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            if not self.dirty.wait(0.2):
                continue
            time.sleep(COALESCE_SECONDS)
            try:
                apply_dirty(self.indexer, self.dirty)
            except Exception:  # a bad moment for the database must not end the watcher
                log.exception("re-indexing changed sessions failed; will retry on the next change")
                time.sleep(0.5)

    def stop(self) -> None:
        self._stopping.set()


def apply_dirty(indexer: Indexer, dirty: _DirtySet) -> None:
    # Taken under the indexer lock, so whoever takes the lock next sees this batch committed.
    with indexer.lock:
        ids, overflow = dirty.take()
        if overflow:
            log.warning("the watcher lost events (queue overflow); reconciling the whole directory")
            indexer.reconcile()
        elif ids:
            indexer.refresh(ids)


# --- inotify -----------------------------------------------------------------------------------


class InotifyWatcher:
    def __init__(self, indexer: Indexer) -> None:
        from watchdog.observers.inotify_c import InotifyConstants as C
        from watchdog.observers.inotify_c import InotifyFD

        self.indexer = indexer
        self.dirty = _DirtySet()
        self._inotify = InotifyFD()
        self._session_mask = (
            C.IN_MODIFY | C.IN_ATTRIB | C.IN_CLOSE_WRITE | C.IN_MOVED_FROM | C.IN_MOVED_TO
            | C.IN_CREATE | C.IN_DELETE | C.IN_DELETE_SELF | C.IN_MOVE_SELF | C.IN_DONT_FOLLOW | C.IN_ONLYDIR
        )  # fmt: skip
        self._cookie_mask = C.IN_CREATE | C.IN_ONLYDIR
        self._cookie_dir = tempfile.mkdtemp(prefix="ccweb-index-cookies-", dir=_cookie_parent())
        self._cookie_serial = itertools.count(1)
        self._cookie_seen = 0
        self._cookie_issued = 0
        self._cookie_cond = threading.Condition()
        self._healthy = False
        self._applier = _Applier(indexer, self.dirty)
        self._callbacks = _Callbacks(self)

    @property
    def running(self) -> bool:
        return self._healthy

    def start(self) -> None:
        from watchdog.observers.inotify_c import CallbackId

        self._inotify.start()
        self._cookie_wd = self._inotify.add_callback(
            os.fsencode(self._cookie_dir), self._cookie_mask, self._callbacks.cookie, CallbackId(1)
        )
        self._session_wd = self._inotify.add_callback(
            os.fsencode(self.indexer.sessions_dir), self._session_mask, self._callbacks.sessions, CallbackId(2)
        )
        self._healthy = True
        self._applier.start()
        # Everything that changed before the watch began is found by comparing signatures once.
        self.indexer.reconcile()

    def stop(self) -> None:
        self._healthy = False
        self._applier.stop()
        with contextlib.suppress(Exception):
            self._inotify.stop()
        self._applier.join(timeout=5)
        shutil.rmtree(self._cookie_dir, ignore_errors=True)

    def sync(self) -> bool:
        """Make the index reflect every change that completed before this call; False if it cannot."""
        if not self._healthy:
            return False
        with self._cookie_cond:
            serial = next(self._cookie_serial)
            self._cookie_issued = max(self._cookie_issued, serial)
        path = os.path.join(self._cookie_dir, str(serial))
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            os.unlink(path)
        except OSError:
            log.exception("cannot write a watcher cookie in %s", self._cookie_dir)
            return False
        with self._cookie_cond:
            if not self._cookie_cond.wait_for(lambda: self._cookie_seen >= serial, SYNC_TIMEOUT_SECONDS):
                log.warning("the watcher did not see its cookie within %.1f s", SYNC_TIMEOUT_SECONDS)
                return False
        if not self._healthy:
            return False
        apply_dirty(self.indexer, self.dirty)
        return True

    def _overflowed(self) -> None:
        # Lost events may include cookies. The overflow flag makes the next apply a full reconcile,
        # which covers every change so far, so releasing the waiting cookies is sound.
        self.dirty.overflow()
        with self._cookie_cond:
            self._cookie_seen = self._cookie_issued
            self._cookie_cond.notify_all()

    def _cookie_arrived(self, name: bytes) -> None:
        with contextlib.suppress(ValueError):
            serial = int(name)
            with self._cookie_cond:
                self._cookie_seen = max(self._cookie_seen, serial)
                self._cookie_cond.notify_all()

    def _sessions_event(self, event) -> None:  # type: ignore[no-untyped-def]
        if event.is_delete_self or event.is_move_self or event.is_ignored:
            log.warning("the sessions directory was removed or moved; answering from the files until restarted")
            self._healthy = False
            return
        if event.name:
            session_id = session_id_from_name(os.fsdecode(event.name))
            if session_id is not None:
                self.dirty.add(session_id)


class _Callbacks:
    """Adapters from watchdog's WatchCallback protocol to the watcher's two streams."""

    def __init__(self, watcher: InotifyWatcher) -> None:
        self.cookie = _Callback(lambda e: watcher._cookie_arrived(e.name), watcher)
        self.sessions = _Callback(watcher._sessions_event, watcher)


class _Callback:
    def __init__(self, handle, watcher: InotifyWatcher) -> None:  # type: ignore[no-untyped-def]
        self._handle = handle
        self._watcher = watcher

    def on_event(self, event) -> None:  # type: ignore[no-untyped-def]
        self._handle(event)

    def on_watch_deleted(self, wd) -> None:  # type: ignore[no-untyped-def]
        self._watcher._healthy = False

    def on_queue_overflow(self) -> None:
        self._watcher._overflowed()


# --- polling -----------------------------------------------------------------------------------


class PollingWatcher:
    def __init__(self, indexer: Indexer, interval: float = 1.0) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers.polling import PollingObserver

        self.indexer = indexer
        self.dirty = _DirtySet()
        dirty = self.dirty

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:  # type: ignore[no-untyped-def]
                for path in (event.src_path, getattr(event, "dest_path", "")):
                    if path and os.path.dirname(os.fsdecode(path)) == indexer.sessions_dir:
                        session_id = session_id_from_name(os.path.basename(os.fsdecode(path)))
                        if session_id is not None:
                            dirty.add(session_id)

        self._observer = PollingObserver(timeout=interval)
        self._observer.schedule(Handler(), indexer.sessions_dir, recursive=False)
        self._applier = _Applier(indexer, self.dirty)

    @property
    def running(self) -> bool:
        return self._observer.is_alive()

    def start(self) -> None:
        self._observer.start()
        self._applier.start()
        self.indexer.reconcile()

    def stop(self) -> None:
        self._observer.stop()
        self._applier.stop()
        self._observer.join(timeout=5)
        self._applier.join(timeout=5)

    def sync(self) -> bool:
        return False


def start_watcher(indexer: Indexer, *, poll: bool = False) -> Watcher:
    """A started inotify watcher where the kernel offers one, else (or with poll=True) a polling one."""
    if not poll:
        watcher: Watcher | None = None
        try:
            watcher = InotifyWatcher(indexer)
            watcher.start()
            return watcher
        except OSError as exc:
            log.warning("inotify is unavailable (%s); polling the sessions directory instead", exc)
            if watcher is not None:
                watcher.stop()
    watcher = PollingWatcher(indexer)
    watcher.start()
    return watcher
