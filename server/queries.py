"""Reading the index. Each query touches only the rows its answer needs.

Where an answer is made without the index (server.from_files), Python must select and order the
sessions exactly as the SQL here does: `matches` and `answer_order` sit beside the SQL they mirror.
"""

from __future__ import annotations

import re
import sqlite3
from typing import NamedTuple, Protocol

from ccweb_index.indexer.row import COLUMNS, SessionRow
from ccweb_index.indexer.store import IDS_PER_STATEMENT
from ccweb_index.server.tools import (
    UNKNOWN_POSITION,
    Changed,
    ChangePosition,
    ConversationsRequest,
    StoredInput,
)

# A direct child: created through MCP by the source conversation (not a branch, not a grandchild).
_CHILD_OF = "created_from_source = ? AND created_from_kind = 'mcp'"
_ANSWER_ORDER = "updated_at_ms DESC, id ASC"


class Selectable(Protocol):
    """What a selection looks at: a session row, or a session as a change found it (`Facts`)."""

    @property
    def created_from_kind(self) -> str | None: ...
    @property
    def created_from_source(self) -> str | None: ...
    @property
    def agent_key(self) -> str | None: ...
    @property
    def status(self) -> str: ...


def is_child_of(row: Selectable, source: str) -> bool:
    """`_CHILD_OF`, in Python."""
    return row.created_from_source == source and row.created_from_kind == "mcp"


def matches(row: Selectable, request: ConversationsRequest) -> bool:
    """`_where(request)`, in Python (for a readable session: `good = 1`)."""
    return (
        (request.children_of is None or is_child_of(row, request.children_of))
        and (request.agent_key is None or row.agent_key == request.agent_key)
        and (request.status_key is None or row.status == request.status_key)
    )


def answer_order(row: SessionRow) -> tuple[int, str]:
    """`_ANSWER_ORDER`, in Python: most recently updated first, then by id."""
    return -row.updated_at_ms, row.id


def _where(request: ConversationsRequest) -> tuple[str, list[object]]:
    where = ["good = 1"]
    params: list[object] = []
    if request.children_of is not None:
        where.append(_CHILD_OF)
        params.append(request.children_of)
    if request.agent_key is not None:
        where.append("agent_key = ?")
        params.append(request.agent_key)
    if request.status_key is not None:
        where.append("status = ?")
        params.append(request.status_key)
    return " AND ".join(where), params


def conversations(conn: sqlite3.Connection, request: ConversationsRequest, limit: int) -> list[SessionRow]:
    """Up to `limit` sessions matching `request`, in answer order."""
    where, params = _where(request)
    cursor = conn.execute(
        f"SELECT {COLUMNS} FROM sessions WHERE {where} ORDER BY {_ANSWER_ORDER} LIMIT ?", [*params, limit]
    )
    return list(map(SessionRow._make, cursor))


def good_rows(conn: sqlite3.Connection, session_ids: list[str]) -> list[SessionRow]:
    """The last readable versions of these sessions, for those that have one."""
    out: list[SessionRow] = []
    for start in range(0, len(session_ids), IDS_PER_STATEMENT):
        chunk = session_ids[start : start + IDS_PER_STATEMENT]
        cursor = conn.execute(
            f"SELECT {COLUMNS} FROM sessions WHERE good = 1 AND id IN ({','.join('?' * len(chunk))})", chunk
        )
        out += map(SessionRow._make, cursor)
    return out


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


# --- the change sequence (migrations m005): what a changeToken stands for ------------------------

_INDEX_ID = re.compile(r"[0-9a-f]{16}")


class Facts(NamedTuple):
    """A listed session as one change found it (before or after): what a selection looks at."""

    created_from_kind: str | None
    created_from_source: str | None
    agent_key: str | None
    status: str


class Change(NamedTuple):
    seq: int
    session_id: str
    before: Facts | None  # None: not listed before (created, or readable for the first time)
    after: Facts | None  # None: deleted


_CHANGE_COLUMNS = (
    "seq, session_id, before_listed, before_created_from_kind, before_created_from_source, before_agent_key, "
    "before_status, after_listed, after_created_from_kind, after_created_from_source, after_agent_key, after_status"
)


def change_position(conn: sqlite3.Connection) -> ChangePosition:
    """The index's id and its last change's number. Read it before what an answer shows: a change
    committed in between is then reported again by the next wait, never lost."""
    row = conn.execute(
        "SELECT (SELECT value FROM meta WHERE key = 'index_id'), "
        "(SELECT seq FROM sqlite_sequence WHERE name = 'changes')"
    ).fetchone()
    index_id, seq = row
    if not isinstance(index_id, str) or not _INDEX_ID.fullmatch(index_id):
        return UNKNOWN_POSITION
    return ChangePosition(index_id, seq if isinstance(seq, int) else 0)


def changes_after(conn: sqlite3.Connection, after: int, upto: int) -> list[Change] | None:
    """The changes numbered after `after` up to `upto`, oldest first; None when the log no longer
    holds all of them (it keeps the last migrations.CHANGE_LOG_ROWS)."""
    oldest = conn.execute("SELECT MIN(seq) FROM changes").fetchone()[0]
    if upto > after and (oldest is None or oldest > after + 1):
        return None
    cursor = conn.execute(f"SELECT {_CHANGE_COLUMNS} FROM changes WHERE seq > ? AND seq <= ? ORDER BY seq", (after, upto))
    changes = []
    for seq, session_id, *rest in cursor:  # rest: before_listed, before's facts, after_listed, after's facts
        old = Facts(*rest[1:5]) if rest[0] else None
        new = Facts(*rest[6:10]) if rest[5] else None
        changes.append(Change(seq, session_id, old, new))
    return changes


def change_selected(change: Change, request: ConversationsRequest) -> bool:
    """A change concerns a selection when the session matched it before or after: one that enters
    or leaves a filter (or, deleted, the list) is reported. The one place a wait decides what it
    watches; a selection that needs more than the session's own facts must extend it."""
    return any(facts is not None and matches(facts, request) for facts in (change.before, change.after))


def selected_changes(changes: list[Change], request: ConversationsRequest) -> list[Changed]:
    """Each selected session once, most recent change first, deleted if its last change deleted it."""
    latest: dict[str, Change] = {}
    for change in changes:
        if change_selected(change, request):
            latest.pop(change.session_id, None)
            latest[change.session_id] = change
    return [Changed(change.session_id, change.after is None) for change in reversed(latest.values())]
