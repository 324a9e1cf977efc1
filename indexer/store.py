"""Writing session rows. Every function here runs inside the caller's write transaction."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ccweb_index.indexer import tree
from ccweb_index.indexer.files import Signature
from ccweb_index.indexer.load import Loaded
from ccweb_index.indexer.row import COLUMNS, PLACEHOLDERS

# `id IN (...)` lists are cut to this many: well below SQLite's limit on a statement's parameters.
IDS_PER_STATEMENT = 500
# A parsed file's row replaces whatever the index held; its error (if it was unreadable before) is gone.
_REPLACE_PARSED = (
    f"INSERT OR REPLACE INTO sessions ({COLUMNS}, ino, size, mtime_ns, ctime_ns, racy, error, good) "
    f"VALUES ({PLACEHOLDERS}, ?, ?, ?, ?, ?, NULL, 1)"
)


@dataclass(frozen=True, slots=True)
class Stored:
    sig: Signature
    racy: bool


def stored_signatures(conn: sqlite3.Connection, ids: list[str] | None = None) -> dict[str, Stored]:
    sql = "SELECT id, ino, size, mtime_ns, ctime_ns, racy FROM sessions"
    if ids is None:
        rows = conn.execute(sql).fetchall()
    else:
        rows = []
        for start in range(0, len(ids), IDS_PER_STATEMENT):
            chunk = ids[start : start + IDS_PER_STATEMENT]
            rows += conn.execute(f"{sql} WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    return {row[0]: Stored(Signature(*row[1:5]), bool(row[5])) for row in rows}


def record_loaded(conn: sqlite3.Connection, loaded: list[Loaded]) -> None:
    """Write a batch of freshly read files: parsed ones replace their rows, unreadable ones are noted."""
    parsed = sorted((item for item in loaded if item.row is not None), key=lambda item: item.session_id)
    ids = [item.session_id for item in parsed]
    edges = tree.edges(conn, ids)
    conn.executemany(
        _REPLACE_PARSED,
        [
            (*item.row, item.sig.ino, item.sig.size, item.sig.mtime_ns, item.sig.ctime_ns, int(item.racy))
            for item in parsed
            if item.row is not None
        ],
    )
    conn.executemany("DELETE FROM user_inputs WHERE session_id = ?", [(item.session_id,) for item in parsed])
    conn.executemany(
        "INSERT INTO user_inputs (session_id, seq, message_id, created_at_ms, content, original_chars) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(item.session_id, *row) for item in parsed for row in item.inputs],
    )
    tree.update(conn, edges, ids)
    for item in loaded:
        if item.row is None:
            record_unreadable(conn, item.session_id, item.sig, item.racy, item.error or "")


def record_unreadable(conn: sqlite3.Connection, session_id: str, sig: Signature, racy: bool, reason: str) -> None:
    """Note the file's current state as unreadable, keeping the last good version if there is one."""
    updated = conn.execute(
        "UPDATE sessions SET ino = ?, size = ?, mtime_ns = ?, ctime_ns = ?, racy = ?, error = ? WHERE id = ?",
        (sig.ino, sig.size, sig.mtime_ns, sig.ctime_ns, int(racy), reason, session_id),
    ).rowcount
    if not updated:
        conn.execute(
            "INSERT INTO sessions (id, ino, size, mtime_ns, ctime_ns, racy, error, good) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            (session_id, sig.ino, sig.size, sig.mtime_ns, sig.ctime_ns, int(racy), reason),
        )


def forget(conn: sqlite3.Connection, session_ids: list[str]) -> None:
    edges = tree.edges(conn, session_ids)
    conn.executemany("DELETE FROM sessions WHERE id = ?", [(i,) for i in session_ids])
    conn.executemany("DELETE FROM user_inputs WHERE session_id = ?", [(i,) for i in session_ids])
    tree.update(conn, edges, session_ids)
