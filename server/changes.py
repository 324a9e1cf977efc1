"""Waking waits when the index changes, whichever process wrote the change.

The change sequence lives in the index (migrations m005), so it is the same for every process that
shares the index: a stdio server, the HTTP server, a `watch` daemon. One thread per process, the
`ChangeHub`, reads where it stands and wakes the waits (server.waits) whose selection a new change
concerns; the others only learn how far they have been looked after, and sleep on.

The hub looks when it is poked and once every `PERIODIC_CHECK_SECONDS` while a wait is open:

- It is poked by this process's indexer each time it has looked at files (indexer.refresh), whether
  or not it wrote: when another process indexed a change first, this process's watcher still saw
  the file change, and its indexer found it already indexed. So a change reaches every process's
  waits as soon as that process's watcher has seen it, whoever committed it.
- The periodic look covers the rest (a change this process's watcher did not see, e.g. without a
  watcher): one read of two values from the index on a connection of the hub's own.

With no wait open the thread sleeps on its condition and costs nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from ccweb_index.indexer.db import read_snapshot
from ccweb_index.server import queries
from ccweb_index.server.tools import ChangePosition, ConversationsRequest

log = logging.getLogger("ccweb_index")

# How often the hub reads the change sequence while a wait is open, when nothing pokes it: the
# longest a change committed by another process (and not seen by this process's watcher) waits.
PERIODIC_CHECK_SECONDS = 1.0
# A read of the index waits at most this long for a lock; the next look tries again.
_READ_TIMEOUT_SECONDS = 1.0


class Waiter:
    """One open wait, as the hub sees it: what it watches, up to where it has been looked at, and
    how to wake it (from the hub's thread)."""

    def __init__(self, selection: ConversationsRequest, seen: ChangePosition, wake: Callable[[], None]) -> None:
        self.selection = selection
        self.seen = seen  # no change after `since` up to here concerns it
        self.wake = wake


class ChangeHub:
    def __init__(self, db_path: Path) -> None:
        self._db_path = db_path
        self._cond = threading.Condition()
        self._waiters: set[Waiter] = set()
        self._poked = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._conn_file: tuple[int, int] | None = None

    def poke(self) -> None:
        """The index may have changed (here or in another process): look now. Cheap; any thread."""
        with self._cond:
            if self._waiters:
                self._poked = True
                self._cond.notify()

    def add(self, waiter: Waiter) -> None:
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="ccweb-index-changes", daemon=True)
                self._thread.start()
            self._waiters.add(waiter)
            self._poked = True  # a change may have landed since the wait looked
            self._cond.notify()

    def discard(self, waiter: Waiter) -> None:
        with self._cond:
            self._waiters.discard(waiter)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    timeout = PERIODIC_CHECK_SECONDS if self._waiters else None
                    self._cond.wait_for(lambda: self._poked or self._closed, timeout)
                    if self._closed:
                        return
                    self._poked = False
                    waiters = list(self._waiters)
                if waiters:
                    self._look(waiters)
        finally:
            self._disconnect()

    def _look(self, waiters: list[Waiter]) -> None:
        try:
            conn = self._connection()
        except (sqlite3.Error, OSError) as exc:  # no index file yet, being replaced
            log.debug("the change hub cannot read the index now (%s)", exc)
            self._disconnect()
            return
        # One snapshot per tree: what a wait's selection reads of the rows is what the log says of
        # them. Not one for the whole look: a snapshot held while every tree is replayed would hold
        # back the WAL's checkpoints all that time.
        trees: dict[str | None, list[Waiter]] = {}
        for waiter in waiters:
            trees.setdefault(waiter.selection.source if waiter.selection.scope == "descendants" else None, []).append(waiter)
        try:
            for group in trees.values():
                with read_snapshot(conn):
                    self._look_in(conn, group)
        except (sqlite3.Error, OSError) as exc:  # locked, being replaced
            log.debug("the change hub cannot read the index now (%s)", exc)
            self._disconnect()

    def _look_in(self, conn: sqlite3.Connection, waiters: list[Waiter]) -> None:
        position = queries.change_position(conn)
        behind = [w for w in waiters if w.seen.index_id == position.index_id and w.seen.seq < position.seq]
        changes = queries.changes_after(conn, min(w.seen.seq for w in behind), position.seq) if behind else []
        trees: dict[tuple[str, int, int], queries.TreeMoves] = {}  # one replay per window of the tree
        for waiter in waiters:
            if waiter.seen.index_id != position.index_id:
                waiter.wake()  # the index was replaced: the wait finds out what that means for it
            elif waiter in behind:
                news = None if changes is None else [c for c in changes if c.seq > waiter.seen.seq]
                if news is None or self._selected(conn, news, waiter, trees):
                    waiter.wake()
                else:
                    waiter.seen = position

    @staticmethod
    def _selected(
        conn: sqlite3.Connection,
        news: list[queries.Change],
        waiter: Waiter,
        trees: dict[tuple[str, int, int], queries.TreeMoves],
    ) -> bool:
        try:
            return bool(queries.selected_changes(conn, news, waiter.selection, trees))
        except sqlite3.Error:  # the tree could not be read now: the wait looks for itself
            return True

    def _connection(self) -> sqlite3.Connection:
        """A read-only connection of the hub's own, to the index file at the path now (a replaced
        index is another file)."""
        st = os.stat(self._db_path)
        if self._conn is None or self._conn_file != (st.st_dev, st.st_ino):
            self._disconnect()
            uri = f"file:{urllib.parse.quote(str(self._db_path))}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=_READ_TIMEOUT_SECONDS, check_same_thread=False)
            self._conn_file = (st.st_dev, st.st_ino)
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = self._conn_file = None
