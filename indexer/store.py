"""Writing session rows. Every function here runs inside the caller's write transaction."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from indexer.files import Signature
from indexer.sessionfile import ParsedSession


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
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows += conn.execute(f"{sql} WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    return {row[0]: Stored(Signature(*row[1:5]), bool(row[5])) for row in rows}


def record_parsed(
    conn: sqlite3.Connection, session_id: str, sig: Signature, racy: bool, parsed: ParsedSession
) -> None:
    updated = parsed.updated_at_ms if parsed.updated_at_ms is not None else sig.mtime_ns // 1_000_000
    conn.execute(
        """
        INSERT OR REPLACE INTO sessions (
            id, ino, size, mtime_ns, ctime_ns, racy, error, good, title, agent, agent_key, status,
            created_at_ms, updated_at_ms, created_from_kind, created_from_source, user_input_count
        ) VALUES (?, ?, ?, ?, ?, ?, NULL, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """,
        (
            session_id, sig.ino, sig.size, sig.mtime_ns, sig.ctime_ns, int(racy),
            parsed.title, parsed.agent, None if parsed.agent is None else parsed.agent.lower(), parsed.status,
            parsed.created_at_ms, updated, parsed.created_from_kind, parsed.created_from_source,
            len(parsed.user_inputs),
        ),
    )  # fmt: skip
    conn.execute("DELETE FROM user_inputs WHERE session_id = ?", (session_id,))
    conn.executemany(
        "INSERT INTO user_inputs (session_id, seq, message_id, created_at_ms, content) VALUES (?, ?, ?, ?, ?)",
        [
            (session_id, seq, item.message_id, item.created_at_ms, item.content)
            for seq, item in enumerate(parsed.user_inputs)
        ],
    )


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
    conn.executemany("DELETE FROM sessions WHERE id = ?", [(i,) for i in session_ids])
    conn.executemany("DELETE FROM user_inputs WHERE session_id = ?", [(i,) for i in session_ids])
