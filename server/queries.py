"""Reading the index. Each query touches only the rows its answer needs.

Where an answer is made without the index (server.from_files), Python must select and order the
sessions exactly as the SQL here does: `select` (with `descendant_depths`, `matches`, `answer_order`)
sits beside the SQL it mirrors.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from ccweb_index.indexer.row import COLUMNS, SessionRow
from ccweb_index.indexer.store import IDS_PER_STATEMENT
from ccweb_index.indexer.tree import DESCENDANTS_MAX_DEPTH
from ccweb_index.server.tools import (
    UNKNOWN_POSITION,
    Changed,
    ChangePosition,
    ConversationsRequest,
    Listed,
    StoredInput,
)

# A direct child: created through MCP by the source conversation (not a branch, not a grandchild).
_CHILD_OF = "created_from_source = ? AND created_from_kind = 'mcp'"
_NEWEST = 2**63 - 1  # above any input's seq
_S_COLUMNS = ", ".join(f"s.{name}" for name in SessionRow._fields)
# Scope "descendants": the source's links (indexer.tree), one range in answer order, as for children.
_DESCENDANTS = (
    f"SELECT {_S_COLUMNS}, tree_links.depth FROM tree_links JOIN sessions AS s ON s.id = tree_links.descendant"
)


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


def in_filters(facts: Selectable, request: ConversationsRequest) -> bool:
    """The agent and status terms of `_filters(request)`, in Python."""
    return (request.agent_key is None or facts.agent_key == request.agent_key) and (
        request.status_key is None or facts.status == request.status_key
    )


def matches(row: SessionRow, request: ConversationsRequest) -> bool:
    """`_filters(request)`, in Python."""
    return (
        in_filters(row, request)
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


def tree_depths(conn: sqlite3.Connection, source: str) -> dict[str, int]:
    """Every session below `source` (tree_links), with its depth."""
    return dict(conn.execute("SELECT descendant, depth FROM tree_links WHERE ancestor = ?", (source,)).fetchall())


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
    # A row's user_input_count is the number of its rows in user_inputs (store.record_loaded writes
    # both from one parse), so the sum stands for a count of that much larger table.
    sessions, unreadable, inputs = conn.execute(
        "SELECT COALESCE(SUM(good), 0), COALESCE(SUM(error IS NOT NULL), 0), COALESCE(SUM(user_input_count), 0)"
        " FROM sessions"
    ).fetchone()
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


# --- the change sequence (migration m006_changes): what a changeToken stands for ------------------------

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


def selected_changes(conn: sqlite3.Connection, changes: list[Change], request: ConversationsRequest) -> list[Changed]:
    """The changes that concern a selection: each selected session once, most recent change first,
    deleted if its last change deleted it. The one place a wait decides what it watches.

    A change concerns a selection when the session matched it before or after (one that enters or
    leaves a filter, the tree, or, deleted, the list is reported), its id among conversationIds if
    those are given."""
    tree = _watched_tree(conn, changes, request) if request.scope == "descendants" else {}
    latest: dict[str, Change] = {}
    for change in changes:
        if request.ids is not None and change.session_id not in request.ids:
            continue
        if any(facts is not None and _selects(facts, request, tree) for facts in (change.before, change.after)):
            latest.pop(change.session_id, None)
            latest[change.session_id] = change
    return [Changed(change.session_id, change.after is None) for change in reversed(latest.values())]


def _selects(facts: Facts, request: ConversationsRequest, tree: dict[str, int]) -> bool:
    """Whether a session with these facts is in the selection's scope and filters (`tree`: the source
    and every session below it with its depth, for scope "descendants", whose list stops at
    DESCENDANTS_MAX_DEPTH)."""
    if not in_filters(facts, request):
        return False
    if request.scope == "all":
        return True
    assert request.source is not None
    if request.scope == "children":
        return is_child_of(facts, request.source)
    return _parent_depth(facts, tree) < DESCENDANTS_MAX_DEPTH


def _parent_depth(facts: Facts, tree: dict[str, int]) -> int:
    """The depth of the session's MCP parent in `tree`; past the bound when it has none there."""
    if facts.created_from_kind != "mcp" or facts.created_from_source is None:
        return DESCENDANTS_MAX_DEPTH
    return tree.get(facts.created_from_source, DESCENDANTS_MAX_DEPTH)


def _watched_tree(conn: sqlite3.Connection, changes: list[Change], request: ConversationsRequest) -> dict[str, int]:
    """The source (depth 0) and every session below it now (tree_links), and every session a change
    shows below one of those within the bound, before or after it: a deleted subtree has left
    tree_links, but its tombstones still name their parents."""
    assert request.source is not None
    members = {**tree_depths(conn, request.source), request.source: 0}
    while True:
        joined: dict[str, int] = {}
        for change in changes:
            depths = [_parent_depth(facts, members) for facts in (change.before, change.after) if facts is not None]
            parent = min(depths, default=DESCENDANTS_MAX_DEPTH)
            if change.session_id not in members and parent < DESCENDANTS_MAX_DEPTH:
                joined[change.session_id] = min(parent + 1, joined.get(change.session_id, parent + 1))
        if not joined:
            return members
        members |= joined
