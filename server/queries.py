"""Reading the index. Each query touches only the rows its answer needs."""

from __future__ import annotations

import sqlite3

from ccweb_index.server.tools import StoredInput

_COLUMNS = (
    "id, title, agent, status, created_at_ms, updated_at_ms, created_from_kind, user_input_count"
)


def session_state(conn: sqlite3.Connection, session_id: str) -> tuple[bool, str | None, int] | None:
    """(has a good version, current error, user input count) of one session, or None if not indexed."""
    row = conn.execute(
        "SELECT good, error, user_input_count FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    return None if row is None else (bool(row[0]), row[1], row[2])


def newest_inputs(conn: sqlite3.Connection, session_id: str, limit: int) -> list[StoredInput]:
    rows = conn.execute(
        "SELECT message_id, created_at_ms, content, original_chars FROM user_inputs WHERE session_id = ? "
        "ORDER BY seq DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return [StoredInput(*row) for row in rows]


def conversations(
    conn: sqlite3.Connection,
    *,
    children_of: str | None,
    agent_key: str | None,
    status_key: str | None,
    limit: int,
) -> list[sqlite3.Row]:
    """Up to `limit` matching sessions in answer order (updatedAt desc, id asc)."""
    where = ["good = 1"]
    params: list[object] = []
    if children_of is not None:
        where += ["created_from_source = ?", "created_from_kind = 'mcp'"]
        params.append(children_of)
    if agent_key is not None:
        where.append("agent_key = ?")
        params.append(agent_key)
    if status_key is not None:
        where.append("status = ?")
        params.append(status_key)
    params.append(limit)
    cursor = conn.execute(
        f"SELECT {_COLUMNS} FROM sessions WHERE {' AND '.join(where)} "
        "ORDER BY updated_at_ms DESC, id ASC LIMIT ?",
        params,
    )
    cursor.row_factory = sqlite3.Row
    return cursor.fetchall()


def children_ids(conn: sqlite3.Connection, source: str) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM sessions WHERE created_from_source = ? AND created_from_kind = 'mcp' AND good = 1",
        (source,),
    ).fetchall()
    return [row[0] for row in rows]


def counts(conn: sqlite3.Connection) -> dict[str, object]:
    sessions, unreadable = conn.execute(
        "SELECT COALESCE(SUM(good), 0), COALESCE(SUM(error IS NOT NULL), 0) FROM sessions"
    ).fetchone()
    inputs = conn.execute("SELECT COUNT(*) FROM user_inputs").fetchone()[0]
    last = conn.execute("SELECT value FROM meta WHERE key = 'last_reconcile_ns'").fetchone()
    return {
        "sessions": sessions,
        "unreadable": unreadable,
        "inputs": inputs,
        "last_reconcile_ns": None if last is None else last[0],
    }


def unreadable(conn: sqlite3.Connection) -> list[tuple[str, str, bool]]:
    rows = conn.execute("SELECT id, error, good FROM sessions WHERE error IS NOT NULL ORDER BY id").fetchall()
    return [(row[0], row[1], bool(row[2])) for row in rows]
