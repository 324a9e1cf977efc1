"""What can go wrong with the index, drawn in one place (after httpx's `_exceptions.py`).

    IndexFailure            the index cannot serve now: the caller answers from the session files
    ├── IndexBusy           another connection holds a lock beyond the busy timeout; the index is fine
    ├── IndexBroken         damaged, or its schema is gone: delete it and rebuild it from the files
    ├── IndexMoved          the file this connection uses was deleted or replaced: open the one at the path
    └── IndexUnavailable    anything else (not open, disk full, I/O error, not writable): retry later

    IndexMismatch           the file at the index path is not this directory's index (another
                            directory's, another program's file, not a regular file): a
                            configuration error for the user to fix, never answered around
    IndexInsideSessions     the index path resolves inside the sessions directory, which is only
                            ever read: a configuration error, refused before anything is written

`translate` is the one place where an `sqlite3.Error` (or, while opening, an `OSError` about the
index's own files) becomes one of these. Callers write `except IndexBroken:`, never look at codes.
"""

from __future__ import annotations

import re
import sqlite3


class IndexFailure(Exception):
    """The index cannot serve this call; what to do about it is in the subclass.

    `about`: the open index (`indexer.db.Index`) whose connection failed; None when no connection
    did (an open, a lock waited for past the deadline). The handle ignores a failure about an index
    it has replaced meanwhile."""

    about: object | None = None


class IndexBusy(IndexFailure):
    """Another connection (or thread) holds the index beyond the time we wait: retry later."""


class IndexBroken(IndexFailure):
    """The database is damaged or lost its schema: delete it and rebuild it from the session files."""


class IndexMoved(IndexFailure):
    """The database file this connection uses was deleted or replaced: open the one at the path."""


class IndexUnavailable(IndexFailure):
    """The index cannot be used now (not open, disk full, I/O error, not writable): retry later."""


class IndexMismatch(Exception):
    """The file at the index path is not this sessions directory's index, and is left as it is."""


class IndexInsideSessions(ValueError):
    """The index path resolves inside the sessions directory, which is only ever read."""


_SQLITE_ERROR, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 1, 5, 6, 8
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_SQLITE_READONLY_DBMOVED = _SQLITE_READONLY | (4 << 8)
# A schema not the migrations' (a column an INSERT names is "has no column named" in SQLite's words).
_SCHEMA_GONE = re.compile(r"no such (table|column|index)|has no column named|malformed|not a database", re.IGNORECASE)
# Failures that say nothing about the database file itself: the lock, the disk, the permissions.
_ENVIRONMENTAL = {3, 5, 6, 7, 8, 9, 10, 13, 14, 15, 22, 23}  # PERM BUSY LOCKED NOMEM READONLY INTERRUPT
# IOERR FULL CANTOPEN PROTOCOL NOLFS AUTH


def translate(exc: sqlite3.Error | OSError, *, opening: bool = False) -> IndexFailure:
    """What a failure of the index means for its user.

    `opening`: the failure happened while opening and migrating. Then anything that is not about the
    lock, the disk or the permissions (not a database, corrupt, a schema the migrations cannot apply
    to, e.g. a table made by a migration whose record was lost) means the file cannot serve as the
    index: it is broken, and rebuilt.
    """
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, OSError):
        return IndexUnavailable(message)
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return IndexBusy(message)
    if opening:
        environmental = primary in _ENVIRONMENTAL and code != _SQLITE_READONLY_DBMOVED
        return IndexUnavailable(message) if environmental else IndexBroken(message)
    if code == _SQLITE_READONLY_DBMOVED:
        return IndexMoved(message)
    if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return IndexBroken(message)
    schema_error = primary == _SQLITE_ERROR or (primary is None and isinstance(exc, sqlite3.DatabaseError))
    if schema_error and _SCHEMA_GONE.search(str(exc)):
        return IndexBroken(message)
    return IndexUnavailable(message)
