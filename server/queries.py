"""Reading the index. Each query touches only the rows its answer needs.

Where an answer is made without the index (server.from_files), Python must select and order the
sessions exactly as the SQL here does: `select` (with `descendant_depths`, `matches`, `answer_order`)
sits beside the SQL it mirrors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ccweb_index.indexer.row import COLUMNS, SessionRow
from ccweb_index.indexer.store import IDS_PER_STATEMENT
from ccweb_index.indexer.tree import DESCENDANTS_MAX_DEPTH
from ccweb_index.server.tools import ConversationsRequest, Listed, StoredInput

# A direct child: created through MCP by the source conversation (not a branch, not a grandchild).
_CHILD_OF = "created_from_source = ? AND created_from_kind = 'mcp'"
_NEWEST = 2**63 - 1  # above any input's seq
_S_COLUMNS = ", ".join(f"s.{name}" for name in SessionRow._fields)
# Scope "descendants": the source's links (indexer.tree), one range in answer order, as for children.
_DESCENDANTS = (
    f"SELECT {_S_COLUMNS}, tree_links.depth FROM tree_links JOIN sessions AS s ON s.id = tree_links.descendant"
)


def is_child_of(row: SessionRow, source: str) -> bool:
    """`_CHILD_OF`, in Python."""
    return row.created_from_source == source and row.created_from_kind == "mcp"


def descendant_depths(rows: Iterable[SessionRow], source: str) -> dict[str, int]:
    """The links of indexer.tree, walked down from `source` in Python: the depth of every session below it.

    Every session has one parent, so a walk can come back to a session only along a cycle through the
    source: the walk never goes on from the source again."""
    children: dict[str, list[str]] = {}
    for row in rows:
        if row.created_from_kind == "mcp" and row.created_from_source is not None:
            children.setdefault(row.created_from_source, []).append(row.id)
    depths: dict[str, int] = {}
    level, depth = [source], 0
    while level and depth < DESCENDANTS_MAX_DEPTH:
        depth += 1
        level = [child for parent in level if depth == 1 or parent != source for child in children.get(parent, ())]
        for child in level:
            depths.setdefault(child, depth)
    return depths


def matches(row: SessionRow, request: ConversationsRequest) -> bool:
    """`_filters(request)`, in Python."""
    return (
        (request.agent_key is None or row.agent_key == request.agent_key)
        and (request.status_key is None or row.status == request.status_key)
        and (request.ids is None or row.id in request.ids)
        and (request.after is None or answer_order(row) > (-request.after[0], request.after[1]))
    )


def answer_order(row: SessionRow) -> tuple[int, str]:
    """The answer's order, in Python: most recently updated first, then by id."""
    return -row.updated_at_ms, row.id


def select(rows: list[SessionRow], request: ConversationsRequest) -> list[Listed]:
    """`conversations(conn, request, limit)`, in Python over the readable sessions, without the limit."""
    if request.scope == "descendants":
        assert request.source is not None
        depths = descendant_depths(rows, request.source)
        listed = [Listed(row, depths[row.id]) for row in rows if row.id in depths]
    else:
        source = request.source if request.scope == "children" else None
        listed = [Listed(row) for row in rows if source is None or is_child_of(row, source)]
    return sorted((item for item in listed if matches(item.row, request)), key=lambda item: answer_order(item.row))


def _filters(request: ConversationsRequest, key: tuple[str, str]) -> tuple[list[str], list[object]]:
    """`key`: the columns of the sort key (updated_at_ms and the id) to page on."""
    updated, ident = key
    where: list[str] = []
    params: list[object] = []
    if request.agent_key is not None:
        where.append("agent_key = ?")
        params.append(request.agent_key)
    if request.status_key is not None:
        where.append("status = ?")
        params.append(request.status_key)
    if request.ids is not None:  # at most MAX_CONVERSATION_IDS, well within one statement's parameters
        where.append(f"{ident} IN ({','.join('?' * len(request.ids))})")
        params += request.ids
    if request.after is not None:
        # The first term is a range of the order's index; the second keeps only what sorts after.
        updated_at_ms, last_id = request.after
        where.append(f"{updated} <= ? AND ({updated} < ? OR {ident} > ?)")
        params += [updated_at_ms, updated_at_ms, last_id]
    return where, params


def conversations(conn: sqlite3.Connection, request: ConversationsRequest, limit: int) -> list[Listed]:
    """Up to `limit` sessions matching `request`, in answer order."""
    if request.scope == "descendants":
        key = ("tree_links.updated_at_ms", "tree_links.descendant")
        where, params = _filters(request, key)
        sql = f"{_DESCENDANTS} WHERE tree_links.ancestor = ?"
        params.insert(0, request.source)
    else:
        key = ("updated_at_ms", "id")
        where, params = _filters(request, key)
        sql = f"SELECT {COLUMNS}, NULL FROM sessions WHERE good = 1"
        if request.scope == "children":
            sql += f" AND {_CHILD_OF}"
            params.insert(0, request.source)
    sql += "".join(f" AND {term}" for term in where)
    cursor = conn.execute(f"{sql} ORDER BY {key[0]} DESC, {key[1]} ASC LIMIT ?", [*params, limit])
    return [Listed(SessionRow._make(found[:-1]), found[-1]) for found in cursor]


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


def children_ids(conn: sqlite3.Connection, source: str) -> list[str]:
    rows = conn.execute(f"SELECT id FROM sessions WHERE {_CHILD_OF} AND good = 1", (source,)).fetchall()
    return [row[0] for row in rows]


def descendant_ids(conn: sqlite3.Connection, source: str) -> list[str]:
    rows = conn.execute("SELECT descendant FROM tree_links WHERE ancestor = ?", (source,)).fetchall()
    return [row[0] for row in rows]


def session_state(conn: sqlite3.Connection, session_id: str) -> tuple[bool, str | None] | None:
    """(has a good version, current error) of one session, or None if not indexed."""
    row = conn.execute("SELECT good, error FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else (bool(row[0]), row[1])


def newest_inputs(conn: sqlite3.Connection, session_id: str, limit: int, start: int | None = None) -> list[StoredInput]:
    """Up to `limit` inputs, newest first, from the one at `start` (its seq) or the newest."""
    rows = conn.execute(
        "SELECT seq, message_id, created_at_ms, content, original_chars FROM user_inputs "
        "WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT ?",
        (session_id, _NEWEST if start is None else start, limit),
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
