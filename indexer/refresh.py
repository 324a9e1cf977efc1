"""Bringing the index in line with the sessions directory: all of it, some files, or just the listing."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ccweb_index.indexer import store
from ccweb_index.indexer.db import get_meta, set_meta, write_transaction
from ccweb_index.indexer.files import (
    DEFAULT_MAX_SESSION_BYTES,
    Signature,
    dir_signature,
    is_racy,
    list_sessions,
    lstat_session,
)
from ccweb_index.indexer.handle import IndexHandle
from ccweb_index.indexer.load import Loaded, UnreadableLog, load_many

# Bounds one write transaction, so readers in other processes never wait long.
_BATCH_FILES = 1000
_BATCH_BYTES = 64 * 1024 * 1024
# `status` shows the last reconcile to the minute; refreshing the stamp more often would be a write per call.
_RECONCILE_STAMP_NS = 30 * 1_000_000_000


@dataclass
class RefreshStats:
    examined: int = 0
    read: int = 0
    removed: int = 0
    unreadable: int = 0
    changed: set[str] = field(default_factory=set)


class Indexer:
    """Reads session files and writes the index. Thread-safe: the handle's lock guards the connection.

    Its sqlite3 errors come out as the types of indexer.errors (through `IndexHandle.connection`);
    an OSError is the sessions directory's own (a file's failure is noted per file instead).
    """

    def __init__(
        self,
        handle: IndexHandle,
        *,
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        unreadable: UnreadableLog | None = None,
    ) -> None:
        self.handle = handle
        self.sessions_dir = handle.sessions_dir
        self.lock = handle.lock
        self.max_session_bytes = max_session_bytes
        self.unreadable = unreadable or UnreadableLog()
        # Called after each look at files (written or not): the server's waits check the index then.
        self.on_indexed: Callable[[], None] | None = None

    # --- the ways in ------------------------------------------------------------------------

    def ready(self) -> None:
        """Make sure the index in use is the one at the path (`IndexHandle.ready`) and, after it was
        replaced or re-opened, in line with the files. Raises IndexUnavailable when there is none."""
        with self.lock:
            self.handle.ready()
            if self.handle.needs_reconcile:
                self.reconcile()

    def reconcile(self, progress: Callable[[int, int], None] | None = None) -> RefreshStats:
        """Compare every file's signature with the index; read what changed; drop what is gone."""
        with self.handle.connection() as conn:
            try:
                dir_sig: Signature | None = dir_signature(self.sessions_dir)
                looked_at = time.time_ns()
                listing = list_sessions(self.sessions_dir)
            except FileNotFoundError:
                # The directory is gone: it holds no sessions until it is back.
                dir_sig, looked_at, listing = None, time.time_ns(), {}
            stored = store.stored_signatures(conn)
            stats = self._bring_in_line(conn, set(listing) | set(stored), stored, progress=progress)
            self._record_listing(conn, dir_sig, looked_at, reconciled=True)
            self.handle.reconciled()
            return stats

    def refresh(self, session_ids: Iterable[str]) -> RefreshStats:
        """Bring these sessions in line: stat each, and read those whose signature moved or is racy."""
        ids = sorted(set(session_ids))
        if not ids:
            return RefreshStats()
        with self.handle.connection() as conn:
            stored = store.stored_signatures(conn, ids)
            return self._bring_in_line(conn, ids, stored)

    def refresh_listing(self) -> RefreshStats:
        """Notice files added, removed or replaced since the last listing, without a stat per file.

        Creating, deleting or renaming an entry changes the directory's own signature; only then is
        the directory listed again, and only names that appeared, vanished or changed inode are read.
        """
        with self.handle.connection() as conn:
            try:
                dir_sig = dir_signature(self.sessions_dir)
            except FileNotFoundError:
                return self.reconcile()
            if _listing_is_current(conn, dir_sig):
                return RefreshStats()
            looked_at = time.time_ns()
            listing = list_sessions(self.sessions_dir)
            stored = store.stored_signatures(conn)
            moved = {i for i in set(listing) | set(stored) if i not in stored or listing.get(i) != stored[i].sig.ino}
            stats = self._bring_in_line(conn, moved, stored)
            self._record_listing(conn, dir_sig, looked_at)
            return stats

    # --- the work ---------------------------------------------------------------------------

    def _record_listing(
        self, conn: sqlite3.Connection, dir_sig: Signature | None, looked_at: int, *, reconciled: bool = False
    ) -> None:
        values: dict[str, object] = {
            "dir_signature": None if dir_sig is None else _encode_sig(dir_sig),
            "dir_racy": int(dir_sig is None or is_racy(dir_sig, looked_at)),
        }
        last = get_meta(conn, "last_reconcile_ns")
        if reconciled and (not isinstance(last, int) or looked_at - last > _RECONCILE_STAMP_NS):
            values["last_reconcile_ns"] = looked_at
        # A look that changed nothing writes nothing: no write lock is taken, so a call never waits
        # behind another process's writer just to say that all is as it was.
        if any(get_meta(conn, key) != value for key, value in values.items()):
            with write_transaction(conn):
                set_meta(conn, **values)

    def _bring_in_line(
        self,
        conn: sqlite3.Connection,
        ids: Iterable[str],
        stored: dict[str, store.Stored],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> RefreshStats:
        stats = RefreshStats()
        gone: list[str] = []
        wanted: list[tuple[str, int]] = []
        for session_id in ids:
            stats.examined += 1
            st = lstat_session(self.sessions_dir, session_id)
            known = stored.get(session_id)
            if st is None:
                if known is not None:
                    gone.append(session_id)
            elif known is None or known.racy or known.sig != Signature.of(st):
                wanted.append((session_id, st.st_size))
        # In key order, a build appends to the tables' B-trees instead of rewriting pages all over them.
        wanted.sort()
        pending: list[Loaded] = []
        pending_bytes = 0
        loads = load_many(self.sessions_dir, wanted, self.max_session_bytes)
        for done, (session_id, loaded) in enumerate(loads, 1):
            if loaded is None:
                if session_id in stored:
                    gone.append(session_id)
            else:
                pending.append(loaded)
                pending_bytes += loaded.size
            if len(pending) >= _BATCH_FILES or pending_bytes >= _BATCH_BYTES:
                self._write(conn, pending, [], stored, stats)
                pending, pending_bytes = [], 0
            if progress is not None:
                progress(done, len(wanted))
        self._write(conn, pending, gone, stored, stats)
        if self.on_indexed is not None:
            self.on_indexed()
        return stats

    def _write(
        self,
        conn: sqlite3.Connection,
        loaded: list[Loaded],
        gone: list[str],
        stored: dict[str, store.Stored],
        stats: RefreshStats,
    ) -> None:
        if not loaded and not gone:
            return
        with write_transaction(conn):
            # Other processes write this index too, and one may have committed since `stored` was
            # read. Under the write lock: a read replaces a row only if it saw the file in the same
            # or a later state (ctime orders a file's states; userspace cannot set it back), so a
            # late commit of an older read never undoes a newer one; and a file seen gone is
            # forgotten only if its row is still the one that was seen.
            now = store.stored_signatures(conn, [item.session_id for item in loaded] + gone)
            loaded = [item for item in loaded if self._newer_than_row(item, now.get(item.session_id))]
            gone = [i for i in gone if i in now and i in stored and now[i].sig == stored[i].sig]
            store.record_loaded(conn, loaded)
            store.forget(conn, gone)
        for item in loaded:
            stats.read += 1
            stats.changed.add(item.session_id)
            if item.error is not None:
                stats.unreadable += 1
                self.unreadable.note(item)
            else:
                self.unreadable.readable(item.session_id)
        stats.removed += len(gone)
        stats.changed.update(gone)

    def _newer_than_row(self, item: Loaded, row: store.Stored | None) -> bool:
        st = lstat_session(self.sessions_dir, item.session_id)
        if st is not None and Signature.of(st) == item.sig:
            return True  # the file's current state, whatever the clock did
        if row is None:
            return st is not None  # a row forgotten meanwhile stays forgotten if the file is gone
        return row.sig.ctime_ns <= item.sig.ctime_ns


def _listing_is_current(conn: sqlite3.Connection, dir_sig: Signature) -> bool:
    recorded = get_meta(conn, "dir_signature")
    return recorded == _encode_sig(dir_sig) and not get_meta(conn, "dir_racy")


def _encode_sig(sig: Signature) -> str:
    return f"{sig.ino}:{sig.size}:{sig.mtime_ns}:{sig.ctime_ns}"
