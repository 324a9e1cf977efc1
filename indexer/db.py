"""Opening the index database: location, connection settings, migrations, and recovery.

The index is a cache of the session files. A database that cannot be opened or migrated is moved
aside and rebuilt from the files rather than repaired.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import platformdirs
from sqlite_utils import Database

from migrations import migrations

log = logging.getLogger("ccweb_index")

BUSY_TIMEOUT_MS = 30_000


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
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA cache_size = -32000")  # 32 MB: a build's index inserts stay in memory
    return conn


@contextlib.contextmanager
def _open_lock(path: Path) -> Iterator[None]:
    # Serialises schema creation and recovery between processes opening the same index at once.
    with open(f"{path}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def open_index(path: Path, sessions_dir: str) -> sqlite3.Connection:
    """Open (creating, upgrading or rebuilding as needed) the index for `sessions_dir`.

    Raises IndexMismatch when the database at `path` indexes a different directory.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open_lock(path):
        try:
            conn = connect(path)
            _migrate_and_claim(conn, sessions_dir)
            return conn
        except IndexMismatch:
            raise
        except sqlite3.DatabaseError as exc:
            log.warning("index %s cannot be used (%s); rebuilding it from the session files", path, exc)
            with contextlib.suppress(Exception):
                conn.close()
            _discard(path)
            conn = connect(path)
            _migrate_and_claim(conn, sessions_dir)
            return conn


class IndexMismatch(Exception):
    pass


def _migrate_and_claim(conn: sqlite3.Connection, sessions_dir: str) -> None:
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
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_meta(conn: sqlite3.Connection, key: str) -> object:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def set_meta(conn: sqlite3.Connection, **values: object) -> None:
    conn.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(values.items()),
    )
