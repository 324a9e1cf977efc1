"""Opening the index database: location, connection settings, migrations, and recovery.

The index is a cache of the session files. A database that is damaged (not a database, corrupt,
missing its tables) is deleted and rebuilt from the files rather than repaired. One that merely
cannot be used right now (locked by another process, the disk full, the directory not writable) is
left alone: the caller answers from the files meanwhile (see server.service).

A running process also notices when the files of its index are deleted, replaced, truncated, or
lose their `-wal` / `-shm` companions under it (`Index.problem`), and then replaces the index. Closing
the stale connection afterwards is safe: SQLite does not checkpoint or delete the `-wal` / `-shm`
names of a database file that has moved (SQLITE_FCNTL_HAS_MOVED), so it cannot touch the new index's
files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import platformdirs
from sqlite_utils import Database

from ccweb_index.indexer.tuning import BUSY_TIMEOUT_ENV, milliseconds_from_env
from ccweb_index.migrations import migrations

log = logging.getLogger("ccweb_index")

# How long a statement waits for another connection's write lock before giving up. A call that
# gives up answers from the session files (server.service), so this bounds how long a lock held
# elsewhere can delay an answer; our own write transactions are short (at most 200 files).
# CCWEB_INDEX_BUSY_TIMEOUT_MS overrides it (tests use a short one).
BUSY_TIMEOUT_MS = milliseconds_from_env(BUSY_TIMEOUT_ENV, 5_000)
# How long opening waits for another process that is creating, migrating or rebuilding the index.
OPEN_LOCK_TIMEOUT_SECONDS = 10.0
_SIDE_FILES = ("-wal", "-shm")


def default_db_path(sessions_dir: str | os.PathLike[str]) -> Path:
    """One index per sessions directory, keyed by its real path, in the user's cache directory."""
    real = os.path.realpath(sessions_dir)
    key = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return Path(platformdirs.user_cache_dir("ccweb-index")) / f"{key}.sqlite"


def resolve_db_path(sessions_dir: str | os.PathLike[str], db: str | os.PathLike[str] | None) -> Path:
    return Path(db) if db else default_db_path(sessions_dir)


def connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: every write transaction is an explicit, short BEGIN IMMEDIATE ... COMMIT.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA cache_size = -32000")  # 32 MB: a build's index inserts stay in memory
    except BaseException:
        conn.close()
        raise
    return conn


# --- what went wrong ----------------------------------------------------------------------------


class IndexMismatch(Exception):
    pass


class IndexUnavailable(sqlite3.OperationalError):
    """The index cannot be used right now (not open, or another process holds a lock on it)."""


_SQLITE_ERROR, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 1, 5, 6, 8
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_SQLITE_READONLY_DBMOVED = _SQLITE_READONLY | (4 << 8)
_SCHEMA_GONE = re.compile(r"no such (table|column|index)|malformed|not a database", re.IGNORECASE)


def classify(exc: BaseException) -> str:
    """What a failure of the index means for its user.

    - "busy": another connection holds a lock; retry later, the index itself is fine;
    - "broken": the database is damaged or lost its schema; delete it and rebuild from the files;
    - "moved": the file this connection uses was deleted or replaced; open the one at the path;
    - "unavailable": anything else (disk full, I/O error, not writable, not open): retry later.
    """
    if isinstance(exc, IndexUnavailable):
        return "busy" if getattr(exc, "busy", False) else "unavailable"
    if not isinstance(exc, sqlite3.Error):
        return "unavailable"
    code = getattr(exc, "sqlite_errorcode", None)
    if code == _SQLITE_READONLY_DBMOVED:
        return "moved"
    primary = None if code is None else code & 0xFF
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return "busy"
    if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return "broken"
    if primary == _SQLITE_ERROR and _SCHEMA_GONE.search(str(exc)):
        return "broken"
    if primary is None and isinstance(exc, sqlite3.DatabaseError) and _SCHEMA_GONE.search(str(exc)):
        return "broken"
    return "unavailable"


# Failures that say nothing about the database file itself: the lock, the disk, the permissions.
_ENVIRONMENTAL = {3, 5, 6, 7, 8, 9, 10, 13, 14, 15, 22, 23}  # PERM BUSY LOCKED NOMEM READONLY INTERRUPT
# IOERR FULL CANTOPEN PROTOCOL NOLFS AUTH


def environmental(exc: BaseException) -> bool:
    """Whether opening failed for a reason outside the database (so deleting it would not help).

    Anything else while opening and migrating (not a database, corrupt, a schema the migrations
    cannot apply to, e.g. a table made by a migration whose record was lost) means the file cannot
    serve as the index: it is rebuilt.
    """
    if isinstance(exc, (OSError, IndexUnavailable)) or not isinstance(exc, sqlite3.Error):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _ENVIRONMENTAL and code != _SQLITE_READONLY_DBMOVED


class NoIndex:
    """Stands in for the connection while there is no usable index: every use fails cleanly."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.in_transaction = False
        self.total_changes = 0

    def __getattr__(self, name: str) -> object:
        def fail(*args: object, **kwargs: object) -> None:
            raise IndexUnavailable(f"the index is not open ({self.reason})")

        return fail


# --- opening ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _open_lock(path: Path) -> Iterator[None]:
    # Serialises schema creation and recovery between processes opening the same index at once.
    try:
        lock = open(f"{path}.lock", "a+b")
    except OSError as exc:
        raise IndexUnavailable(f"cannot create {path}.lock: {exc.strerror or exc}") from None
    with lock:
        deadline = time.monotonic() + OPEN_LOCK_TIMEOUT_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise IndexUnavailable(f"another process keeps {path}.lock locked") from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Index:
    """An open index and the identity of its files, to notice them being deleted or replaced."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        st = os.stat(path)
        self._main = (st.st_dev, st.st_ino)
        self._size = st.st_size
        # Absent when the journal is not WAL (e.g. a filesystem without shared memory).
        self._side = {suffix: _file_id(f"{path}{suffix}") for suffix in _SIDE_FILES}

    def problem(self) -> str | None:
        """Why this connection no longer serves the index at its path, or None. A few stats."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "the index file was deleted"
        except OSError as exc:
            return f"the index file cannot be looked at ({exc.strerror or exc})"
        if (st.st_dev, st.st_ino) != self._main:
            return "the index file was replaced"
        if st.st_size < self._size:  # SQLite never shrinks it (no VACUUM, no auto_vacuum)
            return "the index file was truncated"
        self._size = st.st_size
        for suffix, expected in self._side.items():
            if expected is not None and _file_id(f"{self.path}{suffix}") != expected:
                return f"its {suffix} file was removed or replaced"
        return None

    def is_at_path(self) -> bool:
        return _file_id(str(self.path)) == self._main

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()


def open_index(path: Path, sessions_dir: str) -> sqlite3.Connection:
    """Open (creating, upgrading or rebuilding as needed) the index for `sessions_dir`.

    Raises IndexMismatch when the database at `path` indexes a different directory, and
    IndexUnavailable (an sqlite3.OperationalError) when it cannot be opened now.
    """
    return open_handle(path, sessions_dir).conn


def open_handle(path: Path, sessions_dir: str, *, replacing: Index | None = None) -> Index:
    """`open_index`, returning the handle. `replacing`: a handle whose files went wrong; its
    database is deleted first if it is still the one at `path` (nobody else replaced it yet)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IndexUnavailable(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    with _open_lock(path):
        if replacing is not None:
            if replacing.is_at_path():
                _discard(path)
            replacing.close()  # after the discard: a moved database is closed without a checkpoint
        conn: sqlite3.Connection | None = None
        try:
            conn = connect(path)
            _migrate_and_claim(conn, sessions_dir)
            return Index(path, conn)
        except IndexMismatch:
            if conn is not None:
                conn.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            if environmental(exc):
                raise _unavailable(exc) from None
            log.warning("index %s cannot be used (%s); rebuilding it from the session files", path, exc)
        _discard(path)
        conn = None
        try:
            conn = connect(path)
            _migrate_and_claim(conn, sessions_dir)
            return Index(path, conn)
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            raise _unavailable(exc) from None


def _unavailable(exc: BaseException) -> IndexUnavailable:
    if isinstance(exc, IndexUnavailable):
        return exc
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    error = IndexUnavailable(reason)
    error.busy = classify(exc) == "busy"  # type: ignore[attr-defined]
    return error


def _migrate_and_claim(conn: sqlite3.Connection, sessions_dir: str) -> None:
    # Each migration runs in its own transaction with the record of it (sqlite-utils), so one
    # interrupted half-way (kill -9, power loss) is rolled back and simply runs again.
    migrations.apply(Database(conn))
    row = conn.execute("SELECT value FROM meta WHERE key = 'sessions_dir'").fetchone()
    if row is None:
        conn.execute("INSERT INTO meta (key, value) VALUES ('sessions_dir', ?)", (sessions_dir,))
    elif row[0] != sessions_dir:
        raise IndexMismatch(
            f"the index belongs to the sessions directory {row[0]!r}, not {sessions_dir!r}; "
            "pass another --db, or delete this index file to rebuild it"
        )


def _discard(path: Path) -> None:
    for suffix in ("", *_SIDE_FILES):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # Also when COMMIT itself failed (disk full, I/O error): a transaction left open would make
        # every later BEGIN on this connection fail.
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def get_meta(conn: sqlite3.Connection, key: str) -> object:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def set_meta(conn: sqlite3.Connection, **values: object) -> None:
    conn.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(values.items()),
    )
