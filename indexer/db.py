"""Opening the index database: location, connection settings, migrations, and recovery.

The index is a cache of the session files. A database that is damaged (not a database, corrupt,
missing its tables) is deleted and rebuilt from the files rather than repaired. One that merely
cannot be used right now (locked by another process, the disk full, the directory not writable) is
left alone: the caller answers from the files meanwhile (see indexer.handle).

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
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import platformdirs

from ccweb_index.indexer import stored as _stored
from ccweb_index.indexer.errors import IndexBroken, IndexInsideSessions, IndexMismatch, IndexUnavailable, translate
from ccweb_index.indexer.private import (
    make_private_dir,
    not_for_the_index,
    not_own_file,
    open_files,
    open_private,
    others_decide,
    prepare_database,
    refuse_inside_sessions,
    refuse_others_files,
    refuse_others_link,
    refuse_others_open_files,
)
from ccweb_index.indexer.stored import STORED_CHARS_KEY
from ccweb_index.indexer.tuning import BUSY_TIMEOUT_ENV, milliseconds_from_env

log = logging.getLogger("ccweb_index")

# How long a statement waits for another connection's write lock before giving up. A call that
# gives up answers from the session files (server.service), so this bounds how long a lock held
# elsewhere can delay an answer; our own write transactions are short (indexer.refresh bounds them
# by _BATCH_FILES and _BATCH_BYTES).
# CCWEB_INDEX_BUSY_TIMEOUT_MS overrides it (tests use a short one).
BUSY_TIMEOUT_MS = milliseconds_from_env(BUSY_TIMEOUT_ENV, 5_000)
# How long opening waits for another process that is creating, migrating or rebuilding the index.
OPEN_LOCK_TIMEOUT_SECONDS = 10.0
_SIDE_FILES = ("-wal", "-shm")
# The page cache of a connection: large enough that a build's index inserts stay in memory.
_CACHE_KIB = 32_000
# A new index's page size. SQLite writes a page at a time, to the WAL and then into the database:
# at 16 KiB rather than its default 4 KiB, a cold build of issue 12's long corpus spent a third
# less CPU committing, and the index came out 8 % smaller (fewer half-empty pages and overflow
# chains for heads of up to STORED_INPUT_CHARS code points). An existing index keeps its pages.
PAGE_BYTES = 16 * 1024
# SQLite's own checkpoint interval, in bytes rather than its 1,000 pages, so that it stays what it
# was with 4 KiB pages whatever the index's page size: the WAL is copied back as often as before.
AUTOCHECKPOINT_BYTES = 1000 * 4096
# The WAL file is cut back to this size each time SQLite starts it over (every frame copied into
# the database and no reader left on it), so a large build does not leave a large file behind for
# every reader to map (issue 12). `settle_wal` empties it after a build and serve's first pass.
WAL_LIMIT_BYTES = 64 * 1024 * 1024
# How long `settle_wal` waits for other processes' readers to leave the WAL. Meanwhile their
# writers wait too (a TRUNCATE checkpoint holds the write lock), so it is short; a call reads for
# milliseconds.
SETTLE_WAIT_MS = 500


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("ccweb-index"))


def default_db_path(sessions_dir: str | os.PathLike[str]) -> Path:
    """One index per sessions directory, keyed by its real path, in the user's cache directory."""
    real = os.path.realpath(sessions_dir)
    key = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return cache_dir() / f"{key}.sqlite"


def resolve_db_path(sessions_dir: str | os.PathLike[str], db: str | os.PathLike[str] | None) -> Path:
    """The index path; raises IndexInsideSessions if it is inside the (read-only) sessions directory,
    IndexMismatch if it is a symlink another user put where others decide. A symlink is resolved:
    SQLite keeps the -wal and -shm beside the file the link leads to, and so the `.lock`, every
    check of those files, and their sizes in `status` go there too."""
    path = Path(db) if db else default_db_path(sessions_dir)
    refuse_inside_sessions(path, sessions_dir)
    if not os.path.islink(path):
        return path
    refuse_others_link(path)
    return Path(os.path.realpath(path))


def connect(path: Path) -> sqlite3.Connection:
    prepare_database(path)  # 0600 before SQLite creates its -wal and -shm beside it, with its mode
    # Autocommit mode: every write transaction is an explicit, short BEGIN IMMEDIATE ... COMMIT.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # before WAL mode writes the first page
        conn.execute("PRAGMA journal_mode = WAL")
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        checkpoint_every(conn, max(1, AUTOCHECKPOINT_BYTES // page_size))
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")  # negative: KiB, not pages
        conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
    except BaseException:
        conn.close()
        raise
    return conn


class _Outdated(Exception):
    """The index keeps less of each input than an answer can show now: it is rebuilt, not used."""


# --- opening ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _open_lock(path: Path) -> Iterator[None]:
    # Serialises schema creation and recovery between processes opening the same index at once.
    name = f"{path}.lock"
    try:
        lock = open(open_private(name, lock=True), "r+b")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise not_for_the_index(name, "is a symbolic link") from None
        raise IndexUnavailable(f"cannot create {name}: {exc.strerror or exc}") from None
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
            _sign(lock)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# What this program writes in the `.lock` beside its index, and nothing else does: a `.lock` that
# holds it says the file beside it was opened here (`_refuse_what_is_not_ours`). An empty one does
# not: other programs leave empty `<file>.lock`s too (the filelock package among them). Written
# once, and never anything else: a reader that does not hold the lock (`_signed`) must never find
# it half written, and every version of this program reads the same bytes.
LOCK_SIGNATURE = b"ccweb-index: this file serialises the opening of the index beside it\n"


def _sign(lock: BinaryIO) -> None:
    lock.seek(0)
    if lock.read(len(LOCK_SIGNATURE) + 1) != LOCK_SIGNATURE:
        lock.seek(0)
        lock.truncate()
        lock.write(LOCK_SIGNATURE)
        lock.flush()


def _signed(lock_path: str) -> bool:
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with open(fd, "rb") as f:
        # Anyone can write the signature: only the user's own .lock is believed.
        return not_own_file(lock_path, os.fstat(fd), lock=True) is None and f.read(len(LOCK_SIGNATURE) + 1) == LOCK_SIGNATURE


def file_id(path: str) -> tuple[int, int] | None:
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
        self.file = (st.st_dev, st.st_ino)
        self._size = st.st_size
        # Absent when the journal is not WAL (e.g. a filesystem without shared memory).
        self._side = {suffix: file_id(f"{path}{suffix}") for suffix in _SIDE_FILES}
        self.directory = file_id(str(path.parent))  # where it was opened: open_handle's `settled_in`

    def problem(self) -> str | None:
        """Why this connection no longer serves the index at its path, or None. A few stats."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "the index file was deleted"
        except OSError as exc:
            return f"the index file cannot be looked at ({exc.strerror or exc})"
        if (st.st_dev, st.st_ino) != self.file:
            return "the index file was replaced"
        if st.st_size < self._size:  # SQLite never shrinks it (no VACUUM, no auto_vacuum)
            return "the index file was truncated"
        self._size = st.st_size
        for suffix, expected in self._side.items():
            if expected is not None and file_id(f"{self.path}{suffix}") != expected:
                return f"its {suffix} file was removed or replaced"
        return None

    def is_at_path(self) -> bool:
        return file_id(str(self.path)) == self.file

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()


def open_index(path: Path, sessions_dir: str) -> sqlite3.Connection:
    """Open (creating, upgrading or rebuilding as needed) the index for `sessions_dir`.

    Raises IndexMismatch when the database at `path` indexes a different directory, and an
    IndexFailure (indexer.errors) when it cannot be opened now.
    """
    return open_handle(path, sessions_dir).conn


def open_handle(
    path: Path, sessions_dir: str, *, replacing: Index | None = None, settled_in: tuple[int, int] | None = None
) -> Index:
    """`open_index`, returning the handle. `replacing`: a handle whose files went wrong; its
    database is deleted first if it is still the one at `path` (nobody else replaced it yet).
    `settled_in`: the identity of the index's directory when `path` was resolved, or when this
    caller last had an index open at `path` (None: there was none); see `_refuse_what_came_since`."""
    try:  # first: our own cache directory is tightened before what is in it is judged
        made = make_private_dir(path.parent, ours=path.parent == cache_dir())
    except OSError as exc:
        raise IndexUnavailable(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    if settled_in is not None:  # a directory made here, the one before deleted, is as good
        _refuse_what_came_since(path, sessions_dir, made or settled_in)
    if replacing is not None and replacing.is_at_path():
        refuse_others_files(path)  # the index in use, to be discarded
    else:  # what took the index's place is judged as a file at the path at the start is
        _refuse_what_is_not_ours(path)
    with _open_lock(path):
        if replacing is not None:
            if replacing.is_at_path():
                _discard(path)
            replacing.close()  # after the discard: a moved database is closed without a checkpoint
        conn: sqlite3.Connection | None = None
        try:
            before = open_files()
            conn = connect(path)
            _migrate_and_claim(conn, sessions_dir)
            refuse_others_open_files(path, before)
            return Index(path, conn)
        except IndexMismatch:
            if conn is not None:
                conn.close()
            raise
        except _Outdated as exc:
            if conn is not None:
                conn.close()
            log.info("index %s %s; rebuilding it from the session files", path, exc)
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            failure = translate(exc, opening=True)
            if not isinstance(failure, IndexBroken):
                raise failure from None
            log.warning("index %s cannot be used (%s); rebuilding it from the session files", path, exc)
        _discard(path)
        conn = None
        try:
            before = open_files()
            conn = connect(path)
            _migrate_and_claim(conn, sessions_dir)
            refuse_others_open_files(path, before)
            return Index(path, conn)
        except IndexMismatch:
            if conn is not None:
                conn.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            raise translate(exc, opening=True) from None


# The first bytes of every SQLite database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _refuse_what_came_since(path: Path, sessions_dir: str, settled_in: tuple[int, int]) -> None:
    """Raise IndexMismatch when what is at `path` now is not where an index was open before: the
    path was resolved when it was given (resolve_db_path), so a symlink at it, or another directory
    in its directory's place, came since, put by whoever can write that directory or one above it.
    An independent review had a link to another program's database migrated into, and a group's
    project directory's member swap the user's private index directory for theirs, or a link to
    the sessions directory, while a server ran. A directory made by this open (`settled_in` is then
    its identity: the one before was deleted, as a cache may be) is as good; so is one in a
    directory only the user and root decide about."""
    # Only through a directory above it that others decide about can someone else have replaced
    # it: otherwise the user did (another process of ours, making our cache directory again).
    if file_id(str(path.parent)) != settled_in and others_decide(os.path.dirname(path.parent)):
        raise IndexMismatch(
            f"the index's directory {path.parent} was replaced since this process began to use that "
            "path, and is not followed; check who can write the directories above it, then restart the command"
        )
    if os.path.islink(path):
        raise not_for_the_index(str(path), "is a symbolic link")
    try:
        refuse_inside_sessions(path, sessions_dir)
    except IndexInsideSessions as exc:
        raise IndexMismatch(str(exc)) from None


def _refuse_what_is_not_ours(path: Path) -> None:
    """Raise IndexMismatch when the file at `path` is not one this program may open, make private,
    write and, when damaged, delete: a device, a FIFO (opening one blocks), another program's
    database, a user's file given as --db by mistake. Ours: nothing there; a file opened here
    before (the `.lock` beside it is signed: then a damaged file is rebuilt as always); an SQLite
    database holding the record of our migrations; else, with no journal pending beside it, an
    empty file or an SQLite database holding nothing at all. What cannot be told is refused:
    refusing costs the user a command, a wrong guess their file."""
    st = refuse_others_files(path)
    if st is None or _signed(f"{path}.lock"):
        return
    # The record before the journals: an index of an older version has an unsigned .lock, and a
    # -wal beside it whenever a process of that version has it open.
    held = "" if st.st_size == 0 else _what_it_holds(path)
    if held is None:
        return
    foreign = _pending_beside(path) or held or None
    if foreign is not None:
        raise IndexMismatch(
            f"{path} is not an index of ccweb-index ({foreign}), and is left as it is; pass another --db, "
            "or remove the file if it is an index of ours that lost its .lock"
        )


def _pending_beside(path: Path) -> str | None:
    # Beside the file the path leads to, where SQLite looks for them (it follows symlinks).
    real = os.path.realpath(path)
    for suffix in ("-wal", "-journal"):
        with contextlib.suppress(OSError):
            if os.stat(f"{real}{suffix}").st_size > 0:
                return f"a database with changes pending in its {suffix} file"
    return None


def _what_it_holds(path: Path) -> str | None:
    """What the file at `path`, not known to be ours, holds: None when it is the record of our
    migrations, "" when it is nothing at all (an SQLite database made empty), else why it is not
    our index. Read `immutable`: no lock taken, nothing made beside another program's database."""
    try:
        with open(path, "rb") as f:
            if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                return "not an SQLite database"
    except OSError as exc:
        raise IndexUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True)  # any path byte, quoted
        try:
            if _recorded_ours(conn):
                return None
            names = [name for (name,) in conn.execute("SELECT name FROM sqlite_master ORDER BY name LIMIT 5")]
            (application,) = conn.execute("PRAGMA application_id").fetchone()
            (version,) = conn.execute("PRAGMA user_version").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"an SQLite database that cannot be read: {exc}"
    if names:
        return f"a database of something else, holding {', '.join(names)}"
    if application or version:
        return "a database of something else: it has an application id or a user version"
    return ""


def _recorded_ours(conn: sqlite3.Connection) -> bool:
    from ccweb_index.migrations import MIGRATION_SET

    sql = f"SELECT 1 FROM {_MIGRATIONS_TABLE} WHERE migration_set = ? LIMIT 1"
    try:
        return conn.execute(sql, (MIGRATION_SET,)).fetchone() is not None
    except sqlite3.OperationalError:  # no such table, or another program's table of that name
        return False


def _migrate_and_claim(conn: sqlite3.Connection, sessions_dir: str) -> None:
    # Each migration runs in its own transaction with the record of it (sqlite-utils), so one
    # interrupted half-way (kill -9, power loss) is rolled back and simply runs again.
    # Imported only when there is one to run: sqlite-utils is a tenth of `serve`'s start, which
    # checks the index path (resolve_db_path) before it answers `initialize` but opens the index
    # only afterwards, and as much of a no-op `build` of 100,000 sessions.
    if not _has_every_migration(conn):
        from sqlite_utils import Database

        from ccweb_index.migrations import migrations

        migrations.apply(Database(conn))
    # The path's bytes: any path the OS accepts, UTF-8 or not (an older index holds it as text).
    claimed = os.fsencode(sessions_dir)
    row = conn.execute("SELECT value FROM meta WHERE key = 'sessions_dir'").fetchone()
    if row is None:
        conn.execute("INSERT INTO meta (key, value) VALUES ('sessions_dir', ?)", (claimed,))
    elif (row[0] if isinstance(row[0], bytes) else os.fsencode(row[0])) != claimed:
        raise IndexMismatch(
            f"the index belongs to the sessions directory {os.fsdecode(row[0])!r}, not {sessions_dir!r}; "
            "pass another --db, or delete this index file to rebuild it"
        )
    _check_stored_chars(conn)


# The table sqlite-utils records applied migrations in.
_MIGRATIONS_TABLE = "_sqlite_migrations"


def _has_every_migration(conn: sqlite3.Connection) -> bool:
    """False also when the record cannot be read (no table yet, another sqlite-utils' layout of it):
    sqlite-utils then makes or mends it, and says what is wrong as it always did."""
    from ccweb_index.migrations import MIGRATION_SET, NAMES

    marks = ", ".join("?" * len(NAMES))
    sql = f"SELECT COUNT(DISTINCT name) FROM {_MIGRATIONS_TABLE} WHERE migration_set = ? AND name IN ({marks})"
    try:
        return bool(conn.execute(sql, (MIGRATION_SET, *NAMES)).fetchone()[0] == len(NAMES))
    except sqlite3.OperationalError:
        return False


def _check_stored_chars(conn: sqlite3.Connection) -> None:
    """Raise _Outdated when the index was written keeping fewer code points of each input than
    an answer can show now (indexer.stored): its short text must never answer."""
    keep = _stored.STORED_INPUT_CHARS  # read at each open, as stored_head reads it at each cut
    stored = get_meta(conn, STORED_CHARS_KEY)
    if not isinstance(stored, int) or stored < keep:
        raise _Outdated(f"keeps {stored} code points of each input, fewer than the {keep} an answer can show")
    if stored > keep:
        # Rows written from now on keep less: say so, so that raising the constant again rebuilds.
        set_meta(conn, **{STORED_CHARS_KEY: keep})


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


@contextlib.contextmanager
def read_snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Every read inside sees one state of the index: in WAL mode, the one its first read finds,
    whatever other connections commit meanwhile. For what reads a change log and the rows it speaks
    of together (a wait)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                # A transaction left open would make the connection's next BEGIN fail (the
                # indexer's, on the shared one).
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                if conn.in_transaction:
                    raise


def checkpoint_less_often(conn: sqlite3.Connection) -> int:
    """For a pass that writes many batches (a cold build, a first pass): SQLite checkpoints the WAL
    once it holds WAL_LIMIT_BYTES instead of every `wal_autocheckpoint` pages, so a sixteenth of the
    checkpoints and their fsyncs for the same bytes (a cold build of issue 12's long corpus spent a
    third of the parent's time in COMMIT). The WAL stays within the bound, `journal_size_limit`
    cuts it back, and `settle_wal` empties it after the pass. Returns the setting to restore."""
    (pages,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    checkpoint_every(conn, max(pages, WAL_LIMIT_BYTES // page_size))
    return int(pages)


def checkpoint_every(conn: sqlite3.Connection, pages: int) -> None:
    conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def settle_wal(conn: sqlite3.Connection, path: Path) -> bool:
    """Copy the whole WAL into the database and truncate it to nothing; False if a reader in
    another process still needed it after SETTLE_WAIT_MS (then `journal_size_limit` cuts it back
    to WAL_LIMIT_BYTES at the next write after that reader leaves).

    The checkpoints SQLite runs on its own at commits are PASSIVE: they never wait, so one that
    finds a reader on the WAL leaves the file as long as it is. TRUNCATE waits for such readers
    (with the busy handler) to finish the read they are in, and then leaves a zero-length file.
    A WAL no larger than SQLite's own checkpoints keep it (`wal_autocheckpoint` pages) is left
    alone: no write lock is taken for nothing, e.g. by a `build` that found nothing to do.
    """
    try:
        size = os.path.getsize(f"{path}-wal")
    except FileNotFoundError:
        return True
    (pages,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    if size <= min(pages * page_size, WAL_LIMIT_BYTES):
        return True
    conn.execute(f"PRAGMA busy_timeout = {SETTLE_WAIT_MS}")
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return not busy


def get_meta(conn: sqlite3.Connection, key: str) -> object:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def set_meta(conn: sqlite3.Connection, **values: object) -> None:
    conn.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(values.items()),
    )
