"""Following the sessions directory, and proving at query time that every change is accounted for.

Two watchers share one interface:

- `InotifyWatcher` reads watchdog's inotify stream (`watchdog.observers.inotify_c.InotifyFD`): one
  kernel queue, events in the order the changes happened, for every watch on it. It watches the
  sessions directory and a private cookie directory elsewhere. `sync()` is Watchman's query cookie:
  create a file in the cookie directory and wait until its event comes back. The kernel queued the
  event of every change that completed before the cookie was created ahead of the cookie, so once
  the cookie is seen, every such change has reached the dirty set. The cookie never touches the
  sessions directory. (watchdog's `Observer` hands each watch to its own emitter thread, which
  reorders events across watches; that is why the raw stream is used here.) When the reader thread
  is parked with the kernel queue empty, nothing can be pending and no cookie is sent
  (indexer.inotify_reader; docs/design.md, "When no cookie is needed").
- `PollingWatcher` uses watchdog's `PollingObserver` for filesystems without inotify (`--poll`).
  Polling cannot prove it has seen everything up to now, so its `sync()` always answers False and
  the caller falls back to checking the files itself.

Both hand changed session ids to an applier thread, which coalesces bursts and re-indexes them. A
batch that fails (the index locked, the disk full...) goes back into the dirty set, so no event is
lost, and is retried with a growing delay; `sync()` applies what is pending itself anyway. So does
a file that could not be read now (out of descriptors or memory, an I/O error: `files.is_transient`):
nothing is recorded of it, it stays dirty, and the applier retries it with a growing delay until it
reads, while every synced call tries it once more.

Each watcher records which directory it watches (`watched`: device and inode). If the sessions path
comes to lead elsewhere (the directory deleted and recreated, renamed, replaced by a symlink), the
owner (server.supervisor) sees `watched` differ from the path's identity and starts a new watcher.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ccweb_index.indexer.errors import IndexFailure
from ccweb_index.indexer.files import dir_identity
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.indexer.sessionfile import session_id_from_name

if TYPE_CHECKING:  # watchdog's modules are imported where a watcher is made
    from watchdog.events import FileSystemEvent
    from watchdog.observers.inotify_c import InotifyEvent, WatchDescriptor

log = logging.getLogger("ccweb_index")

COALESCE_SECONDS = 0.005
SYNC_TIMEOUT_SECONDS = 2.0
# How often an idle applier wakes: to see it is being stopped, and to look at files with another link.
_IDLE_SECONDS = 0.2
# After a failed batch the applier waits this long, doubling up to the maximum, before retrying.
RETRY_SECONDS = (0.5, 30.0)
# After files that could not be read now (a descriptor shortage...), the same, sooner: the shortage
# may end any moment, and until then their answers are their last good versions.
DEFERRED_RETRY_SECONDS = (0.05, 5.0)

# Called with the exception when re-indexing fails in the background.
ErrorHandler = Callable[[BaseException], None]


def _cookie_parent() -> str | None:
    """A memory filesystem if there is one: a cookie is created and removed on every synced call."""
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None  # the system's temporary directory


_COOKIE_PREFIX = "ccweb-index-cookies-"
_COOKIE_DIR_RE = re.compile(re.escape(_COOKIE_PREFIX) + r"(\d+)-")


def _remove_dead_cookie_dirs(parent: str) -> None:
    """Cookie directories left by processes that were killed (kill -9 skips the cleanup)."""
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            match = _COOKIE_DIR_RE.match(entry.name)
            if match is None or not entry.is_dir(follow_symlinks=False):
                continue
            pid = int(match.group(1))
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                pass  # alive, someone else's


class Watcher(Protocol):
    # (device, inode) of the directory being watched, or None.
    watched: tuple[int, int] | None

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def sync(self) -> bool: ...
    def seen_for(self, session_id: str) -> dict[str, int] | None: ...
    @property
    def running(self) -> bool: ...
    # It stopped on a fault of its own (not of the directory): another of its kind would likely too.
    @property
    def broke(self) -> bool: ...


class _DirtySet:
    """Session ids seen changing and not yet re-indexed, each with when (wall clock, ns) its latest
    change was seen here, plus an overflow flag (events were lost)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ids: dict[str, int] = {}
        self._overflow = False
        self.applying = threading.Lock()  # held by whoever is applying a batch (apply_dirty)
        # When the oldest change not yet applied was seen: the watcher's lag is the age of this.
        self.oldest_pending_at: float | None = None
        # Wall clock (ns) when the watch began, and when a change of each file was last seen complete
        # (its close after writing, a rename onto it, its deletion or a rename away); None: the
        # watcher does not see those.
        self.watching_since: int | None = None
        self._completed: dict[str, int] = {}
        # When each file's latest change was seen, kept after it is applied (`seen_for`), and when
        # events were last lost: a change lost then was made before it.
        self._last_seen: dict[str, int] = {}
        self._lost_at = 0

    def written(self, session_id: str) -> int:
        """After what moment a completed write of the file would have been seen (Indexer.refresh)."""
        assert self.watching_since is not None
        with self._cond:
            return self._completed.get(session_id, self.watching_since)

    def seen_for(self, session_id: str) -> int | None:
        """When the latest change of this file was seen here, for `Indexer.refresh(seen=...)`; None
        while a change of it, or lost events, wait to be applied."""
        assert self.watching_since is not None
        with self._cond:
            if self._overflow or session_id in self._ids:
                return None
            return max(self._last_seen.get(session_id, self.watching_since), self._lost_at)

    def add(self, session_id: str, *, completed: bool = False) -> None:
        with self._cond:
            self._ids[session_id] = self._last_seen[session_id] = now = time.time_ns()
            if completed:
                self._completed[session_id] = now
            if self.oldest_pending_at is None:
                self.oldest_pending_at = time.monotonic()
            self._cond.notify_all()

    def overflow(self) -> bool:
        """Mark events lost; False when they were marked lost already (not yet applied)."""
        with self._cond:
            if self._overflow:
                return False
            self._overflow = True
            self._lost_at = time.time_ns()
            if self.oldest_pending_at is None:
                self.oldest_pending_at = time.monotonic()
            self._cond.notify_all()
            return True

    def take(self) -> tuple[dict[str, int], bool, float | None]:
        with self._cond:
            taken = self._ids, self._overflow, self.oldest_pending_at
            self._ids, self._overflow, self.oldest_pending_at = {}, False, None
            return taken

    def restore(self, ids: dict[str, int], overflow: bool, since: float | None) -> None:
        """Put back a batch that could not be applied."""
        with self._cond:
            for session_id, seen in ids.items():
                self._ids[session_id] = max(seen, self._ids.get(session_id, 0))
            self._overflow = self._overflow or overflow
            if since is not None and (self.oldest_pending_at is None or since < self.oldest_pending_at):
                self.oldest_pending_at = since
            self._cond.notify_all()

    def lag(self) -> tuple[float, int]:
        """(seconds since the oldest change not yet taken for re-indexing, changes pending)."""
        with self._cond:
            since = self.oldest_pending_at
            return (0.0 if since is None else time.monotonic() - since), len(self._ids)

    def wait(self, timeout: float, stopping: threading.Event) -> bool:
        """Whether there is something to take, once there is or `stopping` is set (see `wake`)."""
        with self._cond:
            self._cond.wait_for(lambda: self._ids or self._overflow or stopping.is_set(), timeout)
            return bool(self._ids or self._overflow) and not stopping.is_set()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ids)


class _FailureLog:
    """Default error handler: one line when re-indexing starts failing, one when it works again."""

    def __init__(self) -> None:
        self.failing: str | None = None

    def __call__(self, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if message != self.failing:
            self.failing = message
            log.warning("re-indexing changed sessions failed (%s); retrying with back-off", message)

    def recovered(self) -> None:
        if self.failing is not None:
            self.failing = None
            log.info("re-indexing changed sessions works again")


class _Applier(threading.Thread):
    """Re-indexes what the watcher saw change, a burst at a time."""

    def __init__(self, indexer: Indexer, dirty: _DirtySet, on_error: ErrorHandler | None) -> None:
        super().__init__(name="ccweb-index-applier", daemon=True)
        self.indexer = indexer
        self.dirty = dirty
        self._default_log = _FailureLog()
        self._on_error = on_error or self._default_log
        self._stopping = threading.Event()

    def run(self) -> None:
        delay = deferred_delay = 0.0
        while not self._stopping.is_set():
            pending = self.dirty.wait(_IDLE_SECONDS, self._stopping)
            # Files with another link raise no event for a write through it: they are looked at on
            # every turn, so that the waits of issue 13 hear of such a write without a call.
            if self._stopping.is_set() or not (pending or self.indexer.links):
                continue
            if pending:
                time.sleep(COALESCE_SECONDS)
            try:
                deferred = apply_dirty(self.indexer, self.dirty) if pending else set()
                self.indexer.look_at_links()
            except Exception as exc:  # a bad moment for the database must not end the watcher
                try:
                    self._on_error(exc)
                except Exception:
                    log.exception("the watcher's error handler failed")
                delay = _longer(delay, RETRY_SECONDS)
                self._stopping.wait(delay)
                continue
            if delay:
                delay = 0.0
                self._default_log.recovered()
            deferred_delay = _longer(deferred_delay, DEFERRED_RETRY_SECONDS) if deferred else 0.0
            if deferred:
                self._stopping.wait(deferred_delay)

    def stop(self) -> None:
        self._stopping.set()
        self.dirty.wake()  # so that stopping does not wait out the applier's poll


def _longer(delay: float, bounds: tuple[float, float]) -> float:
    return min(max(delay * 2, bounds[0]), bounds[1])


def apply_dirty(indexer: Indexer, dirty: _DirtySet) -> set[str]:
    """Re-index what is dirty; returns the files that could not be read now, which stay dirty."""
    # One apply at a time: a batch is taken under `dirty.applying`, so whoever takes it next (a call
    # whose cookie came back) sees every batch taken before it committed. The index lock is not held
    # meanwhile, only for each commit: a call about another conversation never waits for the parse.
    # A batch that fails goes back, whole: the ids already applied are cheap to check again.
    with indexer.handle.held(dirty.applying):
        ids, overflow, since = dirty.take()
        try:
            if overflow:
                stats = indexer.reconcile()
            elif ids:
                written = None if dirty.watching_since is None else dirty.written
                stats = indexer.refresh(ids, seen=ids, written=written)
            else:
                return set()
        except BaseException:
            dirty.restore(ids, overflow, since)
            raise
        deferred = set(stats.deferred)
        if deferred:
            dirty.restore({i: ids.get(i, 0) for i in deferred}, False, since)
        return deferred


def _initial_reconcile(indexer: Indexer, dirty: _DirtySet, on_error: ErrorHandler | None) -> None:
    # Everything that changed before the watch began is found by comparing signatures once. If the
    # index cannot be written now, the applier does it later (and calls check the files meanwhile).
    try:
        stats = indexer.reconcile()
    except (IndexFailure, OSError) as exc:
        dirty.overflow()
        (on_error or _FailureLog())(exc)
        return
    for session_id in stats.deferred:  # could not be read now: the applier retries them
        dirty.add(session_id)


# --- inotify -----------------------------------------------------------------------------------


class InotifyWatcher:
    def __init__(self, indexer: Indexer, on_error: ErrorHandler | None = None) -> None:
        from watchdog.observers.inotify_c import InotifyConstants as C
        from watchdog.observers.inotify_c import Mask

        from ccweb_index.indexer.inotify_reader import InotifyReader

        self.indexer = indexer
        self.dirty = _DirtySet()
        self.watched: tuple[int, int] | None = None
        self._on_error = on_error
        self._inotify = InotifyReader(on_failure=self._reader_failed)
        # No IN_DONT_FOLLOW: the sessions path itself may be a symlink to the directory (as it may
        # for every other use of the path); entries in it are never followed.
        self._session_mask = Mask(
            C.IN_MODIFY | C.IN_ATTRIB | C.IN_CLOSE_WRITE | C.IN_MOVED_FROM | C.IN_MOVED_TO
            | C.IN_CREATE | C.IN_DELETE | C.IN_DELETE_SELF | C.IN_MOVE_SELF | C.IN_ONLYDIR
        )  # fmt: skip
        self._cookie_mask = Mask(C.IN_CREATE | C.IN_ONLYDIR)
        parent = _cookie_parent()
        _remove_dead_cookie_dirs(parent or tempfile.gettempdir())
        self._cookie_dir = tempfile.mkdtemp(prefix=f"{_COOKIE_PREFIX}{os.getpid()}-", dir=parent)
        self._cookie_serial = itertools.count(1)
        self._cookie_seen = 0
        self._cookie_issued = 0
        self._cookie_cond = threading.Condition()
        self._healthy = False
        self._applier = _Applier(indexer, self.dirty, on_error)
        self._callbacks = _Callbacks(self)

    @property
    def running(self) -> bool:
        return self._healthy and self._inotify.alive

    @property
    def broke(self) -> bool:
        return self._inotify.failed

    def start(self) -> None:
        from watchdog.observers.inotify_c import CallbackId

        self._inotify.start()
        self._cookie_wd = self._inotify.add_callback(
            os.fsencode(self._cookie_dir), self._cookie_mask, self._callbacks.cookie, CallbackId(1)
        )
        before = dir_identity(self.indexer.sessions_dir)
        self.dirty.watching_since = time.time_ns()
        self._session_wd = self._inotify.add_callback(
            os.fsencode(self.indexer.sessions_dir), self._session_mask, self._callbacks.sessions, CallbackId(2)
        )
        # If the path moved to another directory meanwhile, `watched` says None and the owner retries.
        self.watched = before if dir_identity(self.indexer.sessions_dir) == before else None
        self._healthy = True
        self._applier.start()
        _initial_reconcile(self.indexer, self.dirty, self._on_error)

    def stop(self) -> None:
        self._healthy = False
        self._release_cookies()  # calls waiting in sync() return now, unsynced
        self._applier.stop()
        with contextlib.suppress(Exception):
            self._inotify.stop()
        if self._applier.is_alive():
            self._applier.join(timeout=5)
        shutil.rmtree(self._cookie_dir, ignore_errors=True)

    def sync(self) -> bool:
        """Make the index reflect every change that completed before this call; False if it cannot."""
        if not self.running:  # a reader that stopped would leave the cookie unseen until the timeout
            return False
        # Nothing queued and nothing being handled: every such change is in the dirty set already
        # (docs/design.md, "When no cookie is needed"). Else the cookie's round trip proves it.
        if not self.drained() and not self._cookie_round_trip():
            return False
        if not self.running:  # stopped meanwhile: what the reader said may be about a closed queue
            return False
        apply_dirty(self.indexer, self.dirty)
        self.indexer.look_at_links()
        return True

    def seen_for(self, session_id: str) -> dict[str, int] | None:
        """For a call about one file, without a cookie: `Indexer.refresh`'s `seen` for it, when this
        watcher proves that no change of it is left to handle (nothing queued or being handled, and
        none of it waiting to be applied); else None, and a racy row is read again (docs/design.md,
        "One file's answer and the watcher")."""
        if not self._healthy or self.dirty.watching_since is None or not self.drained():
            return None
        if session_id in self.indexer.links:
            return None
        seen = self.dirty.seen_for(session_id)
        return None if seen is None else {session_id: seen}

    def drained(self) -> bool:
        """Whether nothing can be pending now: no event queued, none being handled (`sync` then
        needs no cookie)."""
        return self._inotify.alive and self._inotify.drained()

    @property
    def cookies_sent(self) -> int:
        with self._cookie_cond:
            return self._cookie_issued

    def _cookie_round_trip(self) -> bool:
        """Create a cookie and wait for its event: then every event queued before it has been handled."""
        with self._cookie_cond:
            serial = next(self._cookie_serial)
            self._cookie_issued = max(self._cookie_issued, serial)
        path = os.path.join(self._cookie_dir, str(serial))
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            os.unlink(path)
        except OSError as exc:
            log.warning("cannot write a watcher cookie in %s (%s)", self._cookie_dir, exc.strerror or exc)
            return False
        with self._cookie_cond:
            if not self._cookie_cond.wait_for(lambda: self._cookie_seen >= serial, SYNC_TIMEOUT_SECONDS):
                log.warning("the watcher did not see its cookie within %.1f s", SYNC_TIMEOUT_SECONDS)
                return False
        return True

    def _release_cookies(self) -> None:
        with self._cookie_cond:
            self._cookie_seen = self._cookie_issued
            self._cookie_cond.notify_all()

    def _reader_failed(self) -> None:
        # Calls waiting for a cookie the dead reader will never see go on now, to check the files
        # (`sync` finds the watcher no longer running); they waited for the supervisor's next look.
        self._healthy = False
        self._release_cookies()

    def _overflowed(self) -> None:
        # Lost events may include cookies. The overflow flag makes the next apply a full reconcile,
        # which covers every change so far, so releasing the waiting cookies is sound; it must be
        # set before they are released. watchdog tells each callback (two): said once.
        if self.dirty.overflow():
            log.warning("the watcher lost events (inotify queue overflow); reconciling the whole directory")
        self._release_cookies()

    def _cookie_arrived(self, name: bytes) -> None:
        with contextlib.suppress(ValueError):
            serial = int(name)
            with self._cookie_cond:
                self._cookie_seen = max(self._cookie_seen, serial)
                self._cookie_cond.notify_all()

    def _sessions_event(self, event: InotifyEvent) -> None:
        if event.is_delete_self or event.is_move_self or event.is_ignored:
            if self._healthy:
                log.warning("the sessions directory was removed or moved; answering from the files until it is back")
            self._healthy = False
            return
        if event.name:
            session_id = session_id_from_name(os.fsdecode(event.name))
            if session_id is not None:
                # A delete, or a rename away, completes a change as a write's close does: the
                # version the index holds is no longer the latest complete one.
                completed = event.is_close_write or event.is_moved_to or event.is_delete or event.is_moved_from
                self.dirty.add(session_id, completed=completed)


class _Callbacks:
    """Adapters from watchdog's WatchCallback protocol to the watcher's two streams."""

    def __init__(self, watcher: InotifyWatcher) -> None:
        self.cookie = _Callback(lambda e: watcher._cookie_arrived(e.name), watcher)
        self.sessions = _Callback(watcher._sessions_event, watcher)


class _Callback:
    def __init__(self, handle: Callable[[InotifyEvent], None], watcher: InotifyWatcher) -> None:
        self._handle = handle
        self._watcher = watcher

    def on_event(self, event: InotifyEvent) -> None:
        self._handle(event)

    def on_watch_deleted(self, wd: WatchDescriptor) -> None:
        self._watcher._healthy = False

    def on_queue_overflow(self) -> None:
        self._watcher._overflowed()

    def on_events_lost(self) -> None:
        pass  # watchdog 7.1.1 calls it after every on_queue_overflow, which did all there is to do


# --- polling -----------------------------------------------------------------------------------


class PollingWatcher:
    def __init__(self, indexer: Indexer, interval: float = 1.0, on_error: ErrorHandler | None = None) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers.polling import PollingObserver

        self.indexer = indexer
        self.dirty = _DirtySet()
        self.watched: tuple[int, int] | None = None
        self._on_error = on_error
        dirty = self.dirty

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                for path in (event.src_path, getattr(event, "dest_path", "")):
                    if path and os.path.dirname(os.fsdecode(path)) == indexer.sessions_dir:
                        session_id = session_id_from_name(os.path.basename(os.fsdecode(path)))
                        if session_id is not None:
                            dirty.add(session_id)

        self._observer = PollingObserver(timeout=interval)
        self._observer.schedule(Handler(), indexer.sessions_dir, recursive=False)
        self._applier = _Applier(indexer, self.dirty, on_error)

    @property
    def running(self) -> bool:
        return self._observer.is_alive()

    @property
    def broke(self) -> bool:
        return False  # the supervisor starts another poller, as it would after a directory change

    def start(self) -> None:
        self.watched = dir_identity(self.indexer.sessions_dir)
        self._observer.start()
        self._applier.start()
        _initial_reconcile(self.indexer, self.dirty, self._on_error)

    def stop(self) -> None:
        self._observer.stop()
        self._applier.stop()
        with contextlib.suppress(RuntimeError):
            self._observer.join(timeout=5)
        if self._applier.is_alive():
            self._applier.join(timeout=5)

    def seen_for(self, session_id: str) -> dict[str, int] | None:
        """Polling sees no single change as it happens: a one-file call checks the file itself."""
        return None

    def sync(self) -> bool:
        return False


def start_watcher(indexer: Indexer, *, poll: bool = False, on_error: ErrorHandler | None = None) -> Watcher:
    """A started inotify watcher where the kernel offers one, else (or with poll=True) a polling one.

    inotify is unavailable when the kernel or filesystem lacks it, or when the instance limit
    (fs.inotify.max_user_instances) or watch limit (fs.inotify.max_user_watches) is reached: then
    the directory is polled, and that is logged.
    """
    if not poll:
        watcher: InotifyWatcher | None = None
        try:
            watcher = InotifyWatcher(indexer, on_error)
            watcher.start()
            return watcher
        except OSError as exc:
            log.warning("inotify is unavailable (%s); polling the sessions directory instead", exc)
            if watcher is not None:
                watcher.stop()
    polling = PollingWatcher(indexer, on_error=on_error)
    polling.start()
    return polling
