"""Writing session rows. Every function here runs inside the caller's write transaction."""

from __future__ import annotations

import sqlite3
from dataclasses import astuple, dataclass

from ccweb_index.indexer import tree
from ccweb_index.indexer.files import Signature, SweptFile
from ccweb_index.indexer.load import Loaded
from ccweb_index.indexer.row import COLUMNS, PLACEHOLDERS, SessionRow
from ccweb_index.indexer.sessionfile import Checkpoint

# `id IN (...)` lists are cut to this many: well below SQLite's limit on a statement's parameters.
IDS_PER_STATEMENT = 500
# A parsed file's row replaces whatever the index held; its error (if it was unreadable before) is gone.
# An upsert, not INSERT OR REPLACE: the change triggers (migration m006_changes) see it as the update it is.
_REPLACED = [*SessionRow._fields[1:], "ino", "size", "mtime_ns", "ctime_ns", "racy", "error", "good"]
_REPLACE_PARSED = (
    f"INSERT INTO sessions ({COLUMNS}, ino, size, mtime_ns, ctime_ns, racy, error, good) "
    f"VALUES ({PLACEHOLDERS}, ?, ?, ?, ?, ?, NULL, 1) "
    f"ON CONFLICT (id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _REPLACED)}"
)


@dataclass(frozen=True, slots=True)
class Stored:
    sig: Signature
    racy: int  # files.racy_mark: 0 when settled, else when the racy read began (1: an older index's "racy")
    good: bool  # a readable version is kept
    clean: bool = True  # no error: the kept version is the one the last look (at `racy`) read


def stored_signatures(conn: sqlite3.Connection, ids: list[str] | None = None) -> dict[str, Stored]:
    sql = "SELECT id, ino, size, mtime_ns, ctime_ns, racy, good, error IS NULL FROM sessions"
    if ids is None:
        rows = conn.execute(sql).fetchall()
    else:
        rows = []
        for start in range(0, len(ids), IDS_PER_STATEMENT):
            chunk = ids[start : start + IDS_PER_STATEMENT]
            rows += conn.execute(f"{sql} WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    return {row[0]: Stored(Signature(*row[1:5]), row[5], bool(row[6]), bool(row[7])) for row in rows}


def ids_of_inode(conn: sqlite3.Connection, ino: int) -> list[str]:
    """The sessions last seen as this inode. No index serves it: it runs when a file is first seen
    with another link, which cc-web never makes."""
    return [row[0] for row in conn.execute("SELECT id FROM sessions WHERE ino = ?", (ino,))]


def out_of_line(conn: sqlite3.Connection, swept: list[SweptFile]) -> set[str]:
    """The ids a sweep of the directory (files.sweep_sessions) finds out of line with the index: a
    file whose signature is not a settled (not racy) row's, and a row whose file is gone.

    Compared as sets of plain tuples, so the whole comparison runs in C, and the rows are taken out
    of the sweep's set as they come rather than gathered into a set of their own; the ids of all
    rows are fetched only when the files in line do not account for every row."""
    moved = set(swept)
    moved.difference_update(conn.execute("SELECT id, ino, size, mtime_ns, ctime_ns FROM sessions WHERE racy = 0"))
    due = {file[0] for file in moved}
    in_line = len(swept) - len(moved)  # distinct rows: a directory holds each name once
    if in_line < conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]:
        present = {file[0] for file in swept}
        due.update(row[0] for row in conn.execute("SELECT id FROM sessions") if row[0] not in present)
    return due


def stored_checkpoints(conn: sqlite3.Connection, ids: list[str]) -> dict[str, Checkpoint]:
    """The checkpoints of the indexed (last good) versions of these sessions, where there are any."""
    sql = "SELECT session_id, cut, crc, messages, inputs, first_time, newest_time, times_known, region FROM checkpoints"
    rows = []
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        chunk = ids[start : start + IDS_PER_STATEMENT]
        rows += conn.execute(f"{sql} WHERE session_id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    return {row[0]: Checkpoint(*row[1:]) for row in rows}


def record_loaded(conn: sqlite3.Connection, loaded: list[Loaded]) -> None:
    """Write a batch of freshly read files: parsed ones replace their rows, unreadable ones are noted.

    A file resumed from a checkpoint (`base`) keeps its inputs before `base.inputs`: the caller has
    checked that the index still holds the version that checkpoint describes."""
    parsed = sorted((item for item in loaded if item.row is not None), key=lambda item: item.session_id)
    ids = [item.session_id for item in parsed]
    edges = tree.edges(conn, ids)
    conn.executemany(
        _REPLACE_PARSED,
        [
            (*item.row, item.sig.ino, item.sig.size, item.sig.mtime_ns, item.sig.ctime_ns, item.racy)
            for item in parsed
            if item.row is not None
        ],
    )
    conn.executemany(
        "DELETE FROM user_inputs WHERE session_id = ? AND seq >= ?",
        [(item.session_id, 0 if item.base is None else item.base.inputs) for item in parsed],
    )
    # The head comes as UTF-8 bytes (Loaded.inputs); CAST makes the bound blob the TEXT value with
    # those very bytes (the database's encoding is UTF-8), what binding the str would have stored.
    conn.executemany(
        "INSERT INTO user_inputs (session_id, seq, message_id, created_at_ms, content, original_chars) "
        "VALUES (?, ?, ?, ?, CAST(? AS TEXT), ?)",
        [(item.session_id, *row) for item in parsed for row in item.inputs],
    )
    conn.executemany("DELETE FROM checkpoints WHERE session_id = ?", [(item.session_id,) for item in parsed])
    conn.executemany(
        "INSERT INTO checkpoints (session_id, cut, crc, messages, inputs, first_time, newest_time, times_known, region) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(item.session_id, *astuple(item.checkpoint)) for item in parsed if item.checkpoint is not None],
    )
    tree.update(conn, edges, ids)
    for item in loaded:
        if item.row is None:
            record_unreadable(conn, item.session_id, item.sig, item.racy, item.error or "")


def record_unreadable(conn: sqlite3.Connection, session_id: str, sig: Signature, racy: int, reason: str) -> None:
    """Note the file's current state as unreadable, keeping the last good version if there is one."""
    updated = conn.execute(
        "UPDATE sessions SET ino = ?, size = ?, mtime_ns = ?, ctime_ns = ?, racy = ?, error = ? WHERE id = ?",
        (sig.ino, sig.size, sig.mtime_ns, sig.ctime_ns, racy, reason, session_id),
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
    conn.executemany("DELETE FROM checkpoints WHERE session_id = ?", [(i,) for i in session_ids])
    tree.update(conn, edges, session_ids)
