"""Bringing the index in line with the sessions directory: all of it, or some files."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from ccweb_index.indexer import db, store
from ccweb_index.indexer.db import get_meta, set_meta, write_transaction
from ccweb_index.indexer.errors import IndexFailure
from ccweb_index.indexer.faultlog import FaultLog
from ccweb_index.indexer.files import DEFAULT_MAX_SESSION_BYTES, Signature, lstat_session, sweep_sessions
from ccweb_index.indexer.handle import IndexHandle
from ccweb_index.indexer.load import PARSE_BYTES_IN_FLIGHT, Loaded, UnreadableLog, Wanted, load_many
from ccweb_index.indexer.progress import NO_PROGRESS, Progress
from ccweb_index.indexer.sessionfile import Checkpoint
from ccweb_index.indexer.torn import TornWrites

# Bounds one write transaction, so readers in other processes never wait long.
_BATCH_FILES = 1000
_BATCH_BYTES = 64 * 1024 * 1024
# `status` shows the last reconcile to the minute; refreshing the stamp more often would be a write per call.
_RECONCILE_STAMP_NS = 30 * 1_000_000_000
# A resumed read whose base version was replaced meanwhile is redone from the new one this many
# times (another thread re-indexing the same growing file), then the file is parsed whole.
_RESUME_ATTEMPTS = 3


@dataclass
class RefreshStats:
    examined: int = 0
    read: int = 0
    removed: int = 0
    unreadable: int = 0
    changed: set[str] = field(default_factory=set)
    # Files that could not be read now (files.is_transient), with why: nothing was recorded of
    # them, so they are still due; the caller looks again (the watcher, with back-off).
    deferred: dict[str, str] = field(default_factory=dict)
    # Files caught being written and not waited for (`written` in `Indexer.refresh`): nothing was
    # recorded of them; the end of the write brings an event.
    writing: set[str] = field(default_factory=set)


class Links:
    """The sessions whose file had more than one link when last looked at.

    A write through another link (a path outside the directory, or another session's name) raises no
    inotify event on this session's name, so a watcher cannot vouch for these files: it looks at them
    again itself (docs/design.md, "Files with more than one link")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._ids)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._ids

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._ids)

    def saw(self, session_id: str, links: int) -> bool:
        """Note a look at the file (0 links: it is gone); whether it has only now more than one."""
        with self._lock:
            if links > 1:
                new = session_id not in self._ids
                self._ids.add(session_id)
                return new
            self._ids.discard(session_id)
            return False

    def add(self, session_ids: Iterable[str]) -> None:
        with self._lock:
            self._ids.update(session_ids)

    def replace(self, session_ids: set[str]) -> None:
        with self._lock:
            self._ids = session_ids


class Indexer:
    """Reads session files and writes the index. Thread-safe: the handle's lock guards the connection,
    and is held only to read the index and to commit; files are read and parsed without it.

    Its sqlite3 errors come out as the types of indexer.errors (through `IndexHandle.connection`);
    an OSError is the sessions directory's own (a file's failure is noted per file instead).
    """

    def __init__(
        self,
        handle: IndexHandle,
        *,
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        unreadable: UnreadableLog | None = None,
        parse_bytes_in_flight: int = PARSE_BYTES_IN_FLIGHT,
    ) -> None:
        self.handle = handle
        self.sessions_dir = handle.sessions_dir
        self.lock = handle.lock
        self.max_session_bytes = max_session_bytes
        self.parse_bytes_in_flight = parse_bytes_in_flight
        self.unreadable = unreadable or UnreadableLog()
        self.progress: Progress = NO_PROGRESS  # told about every full pass (reconcile) not given its own
        self._shortage = FaultLog()  # reads failing for the environment's reasons, logged once
        # Called after each look at files (written or not): the server's waits check the index then.
        self.on_indexed: Callable[[], None] | None = None
        self.links = Links()

    # --- the ways in ------------------------------------------------------------------------

    def ready(self) -> None:
        """Make sure the index in use is the one at the path (`IndexHandle.ready`) and, after it was
        replaced or re-opened, in line with the files. Raises IndexUnavailable when there is none.
        (That reconcile runs under the lock throughout: until it is done the index answers nothing.)"""
        with self.handle.held():
            self.handle.ready()
            if self.handle.needs_reconcile:
                self.reconcile()

    def reconcile(self, progress: Progress | None = None) -> RefreshStats:
        """Compare every file's signature with the index; read what changed; drop what is gone.

        Also the check of a call without a caught-up watcher, so the comparison is one readdir, one
        lstat per file and plain tuples; rows are fetched whole only for the files that are due.
        """
        progress = progress or self.progress
        # The sweep (a stat per file) runs outside the lock: a row committed after it either holds
        # the state the sweep saw (nothing to do) or differs from it (the file is due).
        looked_at = time.time_ns()
        linked: set[str] = set()
        try:
            swept = sweep_sessions(self.sessions_dir, linked)
        except FileNotFoundError:
            swept = []  # the directory is gone: it holds no sessions until it is back
        self.links.replace(linked)
        with self.handle.connection() as conn:
            due = store.out_of_line(conn, swept)
            stored = store.stored_signatures(conn, sorted(due))
        try:
            stats = self._bring_in_line(due, stored, progress=progress)
        except BaseException:
            progress.failed()
            raise
        progress.done()
        with self.handle.connection() as now:
            self._stamp_reconcile(now, looked_at)
            if now is conn:  # the index was not replaced meanwhile (a new one needs its own reconcile)
                self.handle.reconciled()
        return stats

    def refresh(
        self,
        session_ids: Iterable[str],
        *,
        seen: Mapping[str, int] | None = None,
        written: Callable[[str], int] | None = None,
    ) -> RefreshStats:
        """Bring these sessions in line: stat each, and read those whose signature moved or is racy.

        `seen`: a watcher's, when (wall clock, ns) it saw each file's latest change. A racy row whose
        read began after that, and whose signature is the file's now, is not read again: that read
        saw the change (another thread or process indexed it first), and any change since brings a
        new event, so the racy rule's worry (a change in the same timestamp tick) is covered.

        `written`: an inotify watcher's, when it saw a write of the file complete (its close, or a
        rename onto it) last, or began to watch. A row whose version was read after that is the
        file's latest complete version, so a file caught being written again is not waited for
        (the torn-write wait is for a complete version the index may have missed): nothing of it
        is recorded, it is in `writing`, and the end of the write brings an event
        (docs/design.md, "A file being written")."""
        ids = sorted(set(session_ids))
        if not ids:
            return RefreshStats()
        with self.handle.connection() as conn:
            stored = store.stored_signatures(conn, ids)
        return self._bring_in_line(ids, stored, seen=seen or {}, written=written)

    def look_at_links(self) -> None:
        """`refresh` the files with more than one link (`Links`), with no watcher's word for them."""
        if self.links:  # without the lock: the usual directory has none
            self.refresh(self.links.ids())

    # --- the work ---------------------------------------------------------------------------

    def _stamp_reconcile(self, conn: sqlite3.Connection, looked_at: int) -> None:
        # A look that changed nothing writes nothing: no write lock is taken, so a call never waits
        # behind another process's writer just to say that all is as it was.
        last = get_meta(conn, "last_reconcile_ns")
        if not isinstance(last, int) or looked_at - last > _RECONCILE_STAMP_NS:
            with write_transaction(conn):
                set_meta(conn, last_reconcile_ns=looked_at)

    def _bring_in_line(
        self,
        ids: Iterable[str],
        stored: dict[str, store.Stored],
        *,
        progress: Progress = NO_PROGRESS,
        seen: Mapping[str, int] | None = None,
        written: Callable[[str], int] | None = None,
    ) -> RefreshStats:
        """Stat `ids`, read (outside the lock) those that moved, and commit them in short batches.

        A file resumed from a checkpoint is committed only if the index still holds the version the
        checkpoint describes; if another thread or process committed another version meanwhile, the
        file is looked at again (and, after _RESUME_ATTEMPTS, parsed whole)."""
        stats = RefreshStats()
        ids = list(ids)
        stats.examined = len(ids)
        looked = False
        for attempt in range(_RESUME_ATTEMPTS + 1):
            gone, wanted = self._examine(ids, stored, seen or {})
            looked = looked or bool(wanted)
            resume = attempt < _RESUME_ATTEMPTS
            current = {i for i, _ in wanted if _is_latest(stored.get(i), written, i)}
            ids = self._load_and_write(wanted, gone, stored, stats, progress, resume=resume, current=current)
            if not ids:
                break
            with self.handle.connection() as conn:
                stored = store.stored_signatures(conn, ids)
        if stats.deferred:
            reason = next(iter(stats.deferred.values()))
            self._shortage.begin(
                f"session files cannot be read now ({reason}); their last good versions answer meanwhile, "
                "and they are read again at the next look"
            )
        elif looked:
            self._shortage.end("session files can be read again")
        if self.on_indexed is not None:
            self.on_indexed()
        return stats

    def _examine(
        self, ids: Iterable[str], stored: dict[str, store.Stored], seen: Mapping[str, int]
    ) -> tuple[list[str], list[tuple[str, int]]]:
        """(ids whose file is gone, (id, size) of those to read): one lstat each, no lock. `seen`:
        as in `refresh`."""
        gone: list[str] = []
        wanted: list[tuple[str, int]] = []
        for session_id in ids:
            st = lstat_session(self.sessions_dir, session_id)
            known = stored.get(session_id)
            if (st is not None and st.st_nlink > 1) or session_id in self.links:
                self._note_links(session_id, st)
            if st is None:
                if known is not None:
                    gone.append(session_id)
            elif known is None or known.sig != Signature.of(st):
                wanted.append((session_id, st.st_size))
            elif known.racy and known.racy < seen.get(session_id, known.racy + 1):
                wanted.append((session_id, st.st_size))
        # In key order, a build appends to the tables' B-trees instead of rewriting pages all over them.
        wanted.sort()
        return gone, wanted

    def _note_links(self, session_id: str, st: os.stat_result | None) -> None:
        """A file found with more than one link makes the sessions that share its inode followed too:
        a link made in the directory after the watch began raised an event on the new name only."""
        if self.links.saw(session_id, 0 if st is None else st.st_nlink):
            assert st is not None
            with self.handle.connection() as conn:
                self.links.add(store.ids_of_inode(conn, st.st_ino))

    def _load_and_write(
        self,
        wanted: list[tuple[str, int]],
        gone: list[str],
        stored: dict[str, store.Stored],
        stats: RefreshStats,
        progress: Progress,
        *,
        resume: bool,
        current: set[str],
    ) -> list[str]:
        """Load `wanted` and commit batches of it; the ids to look at again (`_write`). `resume`:
        another look will follow this one.
        `current`: files whose indexed version is their latest complete one (`refresh`'s `written`)."""
        checkpoints: dict[str, Checkpoint] = {}
        if resume and wanted:
            with self.handle.connection() as conn:
                checkpoints = store.stored_checkpoints(conn, [session_id for session_id, _ in wanted])
        plan = [Wanted(i, size, checkpoints.get(i), i not in current) for i, size in wanted]
        sizes = dict(wanted)
        progress.start(len(sizes), sum(sizes.values()))
        if not plan and not gone:  # the usual look of a call: every file was in line
            return []
        with self._large_pass(len(plan) > _BATCH_FILES or sum(sizes.values()) > _BATCH_BYTES):
            return self._load_and_write_plan(plan, checkpoints, gone, stored, stats, progress, look_again=resume)

    @contextlib.contextmanager
    def _large_pass(self, large: bool) -> Iterator[None]:
        """`db.checkpoint_less_often` for a large pass, set and restored under the lock, which is
        not held in between (calls go on meanwhile)."""
        if not large:
            yield
            return
        with self.handle.connection() as conn:
            restore = db.checkpoint_less_often(conn)
        try:
            yield
        finally:
            with contextlib.suppress(IndexFailure), self.handle.connection() as now:
                if now is conn:  # the index was not replaced meanwhile (a new one has the default)
                    db.checkpoint_every(now, restore)

    def _load_and_write_plan(
        self,
        plan: list[Wanted],
        checkpoints: dict[str, Checkpoint],
        gone: list[str],
        stored: dict[str, store.Stored],
        stats: RefreshStats,
        progress: Progress,
        *,
        look_again: bool,
    ) -> list[str]:
        again: list[str] = []
        pending: list[Loaded] = []
        pending_bytes = 0
        sizes = {w.session_id: w.size for w in plan}
        latest = {w.session_id for w in plan if not w.patient}
        loads = load_many(self.sessions_dir, plan, self.max_session_bytes, self.parse_bytes_in_flight)
        torn = TornWrites(self.sessions_dir, self.max_session_bytes)
        for session_id, loaded in loads:
            known = stored.get(session_id)
            if loaded is not None and torn.worth_waiting_for(loaded, known is None or known.good):
                if session_id in latest:  # the version before this write stands, and is the latest
                    loaded = replace(loaded, writing=True)
                else:
                    loaded = torn.settle(loaded, checkpoints.get(session_id))
            if loaded is None:
                if session_id in stored:
                    gone.append(session_id)
            elif loaded.writing:
                stats.writing.add(session_id)
            elif loaded.transient:
                stats.deferred[session_id] = loaded.error or ""
            else:
                pending.append(loaded)
                pending_bytes += loaded.size
            if len(pending) >= _BATCH_FILES or pending_bytes >= _BATCH_BYTES:
                again += self._write(pending, [], stored, stats, look_again=look_again)
                pending, pending_bytes = [], 0
            progress.advance(1, sizes[session_id])
        again += self._write(pending, gone, stored, stats, look_again=look_again)
        return again

    def _write(
        self,
        loaded: list[Loaded],
        gone: list[str],
        stored: dict[str, store.Stored],
        stats: RefreshStats,
        *,
        look_again: bool,
    ) -> list[str]:
        """Commit a batch (one short write transaction); the ids to look at again: those whose
        resumed read no longer applies, and, if `look_again`, those this commit must not settle
        (`_too_early`)."""
        if not loaded and not gone:
            return []
        with self.handle.connection() as conn, write_transaction(conn):
            # Other processes write this index too, and one may have committed since `stored` was
            # read. Under the write lock: a read replaces a row only if it saw the file in the same
            # or a later state (ctime orders a file's states; userspace cannot set it back), so a
            # late commit of an older read never undoes a newer one; and a file seen gone goes if it
            # is gone still, or if its row is still the one that was seen.
            now = store.stored_signatures(conn, [item.session_id for item in loaded] + gone)
            # A file read and then deleted before this commit: its read is not recorded
            # (`_newer_than_row`), and its row goes, as the delete's own look would have done. That
            # look, if another writer's, forgets only the row it saw, which a read committed first
            # used to replace: the row of a deleted file stayed (an independent stress test).
            files = {item.session_id: lstat_session(self.sessions_dir, item.session_id) for item in loaded}
            gone_since = [i for i, st in files.items() if st is None and i in now]
            # A file still gone under the write lock has no row, whoever committed the one there (a
            # look that forgot only the row it saw kept another writer's late commit of a read from
            # before the delete, and its inputs call answered it: the stress test, six callers). Only
            # a file back at its name since keeps the rule "only the row that was seen".
            still_gone = {i for i in gone if lstat_session(self.sessions_dir, i) is None}
            back = [i for i in gone if i not in still_gone]
            again = _too_early(loaded, back, stored, now, files) if look_again else set()
            loaded = [
                item for item in loaded
                if item.session_id not in again and _newer_than_row(item, now.get(item.session_id), files[item.session_id])
            ]  # fmt: skip
            # A resumed read adds to the version its checkpoint describes: it must still be the one here.
            resumed = [item.session_id for item in loaded if item.base is not None]
            held = store.stored_checkpoints(conn, resumed) if resumed else {}
            stale = {
                item.session_id for item in loaded if item.base is not None and held.get(item.session_id) != item.base
            }
            loaded = [item for item in loaded if item.session_id not in stale]
            gone = [i for i in gone if i in now and (i in still_gone or (i in stored and now[i].sig == stored[i].sig))]
            gone = sorted(set(gone) | set(gone_since))
            store.record_loaded(conn, loaded)
            store.forget(conn, gone)
        self._count(loaded, gone, stored, stats)
        return sorted(stale | again)

    def _count(
        self, loaded: list[Loaded], gone: list[str], stored: dict[str, store.Stored], stats: RefreshStats
    ) -> None:
        for item in loaded:
            stats.read += 1
            stats.changed.add(item.session_id)
            if item.error is not None:
                stats.unreadable += 1
                known = stored.get(item.session_id)
                self.unreadable.note(item, stand_in=known is not None and known.good)
            else:
                self.unreadable.readable(item.session_id)
        stats.removed += len(gone)
        stats.changed.update(gone)


def _newer_than_row(item: Loaded, row: store.Stored | None, st: os.stat_result | None) -> bool:
    """Whether `item` may replace `row`, its file being `st` now (docs/design.md, "Several
    writers" and "Equal ctimes")."""
    if row is None:
        return st is not None  # a row forgotten meanwhile stays forgotten if the file is gone
    if row.sig == item.sig:
        # One state as far as stat can tell. A settled read is the state's final content; of two
        # racy reads, which may differ (two writes in one timestamp tick), the later one.
        return not item.racy or (row.racy != 0 and row.racy <= item.racy)
    if st is None:  # deleted since it was read: `_write` forgets the row
        return False
    if Signature.of(st) == item.sig:
        return True  # the file's current state, whatever the clock did
    # Neither is the file now. Only a strictly later ctime says the item is the later state: with
    # coarse timestamps, equal ctimes may be two states in either order.
    return row.sig.ctime_ns < item.sig.ctime_ns


def _too_early(
    loaded: list[Loaded],
    back: list[str],
    stored: Mapping[str, store.Stored],
    now: Mapping[str, store.Stored],
    files: Mapping[str, os.stat_result | None],
) -> set[str]:
    """The ids this commit must not settle, to be looked at again (docs/design.md, "Equal ctimes",
    rule 0; each found by the stress test, six callers):

    - a read that may be of a file deleted or renamed away since (`_perhaps_deleted`): recorded, it
      brought that version back until the new file's event was applied;
    - a file seen gone and `back` at its name since, whose row another writer replaced: the new
      row may be of the file made again, which must not be forgotten, or a late commit of a read
      from before the delete, which the caller would then answer."""
    replaced = {
        item.session_id for item in loaded if _perhaps_deleted(item, files[item.session_id], stored, item.session_id in now)
    }
    moved = {i for i in back if i in now and i in stored and now[i].sig != stored[i].sig}
    return replaced | moved


def _perhaps_deleted(item: Loaded, st: os.stat_result | None, stored: Mapping[str, store.Stored], row: bool) -> bool:
    """Whether `item` may be a version of a file deleted or renamed away since it was read, though a
    file is at its name (`st`) that is not the state read: another inode is there, or, with no `row`
    now, the row went during this look (a look that saw the file gone forgot it, and the freed
    inode may have been given to the file now there)."""
    if st is None or Signature.of(st) == item.sig:
        return False
    return st.st_ino != item.sig.ino or (not row and item.session_id in stored)


def _is_latest(known: store.Stored | None, written: Callable[[str], int] | None, session_id: str) -> bool:
    """Whether the row holds its file's latest complete version, by a watcher's word (`written`, in
    `Indexer.refresh`): its version was read (a racy read, which records when it began, and one
    that parsed) after the last write of the file the watcher saw complete."""
    return (
        written is not None and known is not None and known.good and known.clean
        and known.racy > written(session_id)
    )  # fmt: skip
