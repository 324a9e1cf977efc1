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
    )
    return list(map(StoredInput._make, rows))


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


# Per change of a window: whether its session was in the tree just before and just after it, and
# the other sessions the change took into the tree or out of it (its subtree), each as (id, facts,
# now in the tree). What a replay of one source's tree finds, for every wait on that tree.
TreeMoves = list[tuple[bool, bool, list[tuple[str, Facts, bool]]]]


def selected_changes(
    conn: sqlite3.Connection,
    changes: list[Change],
    request: ConversationsRequest,
    trees: dict[tuple[str, int, int], TreeMoves] | None = None,
) -> list[Changed]:
    """The changes that concern a selection: each selected session once, most recent change first,
    deleted if the last change of it deleted it (whatever the selection: one deleted and created
    again elsewhere is not). The one place a wait decides what it watches.

    A change concerns a selection when the session matched it before or after (one that enters or
    leaves a filter, the tree, or, deleted, the list is reported), its id among conversationIds if
    those are given. In scope "descendants", membership is the tree's at the moment of the change
    (`_TreeReplay`), and a session that joins or leaves the tree carries its subtree with it: those
    of its members that match the filters are reported too. `trees`: replays already made for this
    window, by source, shared by the waits on one tree. Read `changes` and the index in one read
    transaction: the replay takes a session no change names as the index holds it."""
    moves = _tree_moves(conn, changes, request.source, trees) if request.scope == "descendants" else None
    latest: dict[str, None] = {}  # in the order of their last concerning change
    for n, change in enumerate(changes):
        concerned = _concerned(change, request) if moves is None else _concerned_in_tree(change, moves[n], request)
        for session_id in concerned:
            if request.ids is None or session_id in request.ids:
                latest.pop(session_id, None)
                latest[session_id] = None
    gone = {change.session_id: change.after is None for change in changes}  # the last change of each
    return [Changed(session_id, gone.get(session_id, False)) for session_id in reversed(latest)]


def _concerned(change: Change, request: ConversationsRequest) -> list[str]:
    """Scopes "all" and "children": the change's session, if it matched before or after."""
    for facts in (change.before, change.after):
        if facts is not None and in_filters(facts, request):
            if request.scope == "all" or (request.source is not None and is_child_of(facts, request.source)):
                return [change.session_id]
    return []


def _concerned_in_tree(change: Change, move: tuple[bool, bool, list[tuple[str, Facts, bool]]], request: ConversationsRequest) -> list[str]:
    was_in, is_in, carried = move
    own = (was_in and change.before is not None and in_filters(change.before, request)) or (
        is_in and change.after is not None and in_filters(change.after, request)
    )
    return ([change.session_id] if own else []) + [member for member, facts, _ in carried if in_filters(facts, request)]


def _tree_moves(
    conn: sqlite3.Connection,
    changes: list[Change],
    source: str | None,
    trees: dict[tuple[str, int, int], TreeMoves] | None,
) -> TreeMoves:
    assert source is not None
    key = (source, changes[0].seq if changes else 0, changes[-1].seq if changes else 0)
    if trees is not None and key in trees:
        return trees[key]
    replay = _TreeReplay(conn, changes, source)
    moves = [replay.apply(change) for change in changes]
    if trees is not None:
        trees[key] = moves
    return moves


def _parent(facts: Facts | None) -> str | None:
    """A session's MCP parent; None for one that is not listed or not a child."""
    if facts is None or facts.created_from_kind != "mcp":
        return None
    return facts.created_from_source


class _TreeReplay:
    """Scope "descendants" through a window of changes: every session's facts as they were at each
    change, to tell whether it was in the source's tree then. It starts from the window's beginning
    (a changed session as its first change found it, any other as the index holds it, which it was
    throughout the window) and applies the changes in order. Membership as the tree is now
    (`tree_links`) missed a change made in the tree by a session that a later change took out of it
    with an ancestor (found by an independent test)."""

    def __init__(self, conn: sqlite3.Connection, changes: list[Change], source: str) -> None:
        self._conn, self._source = conn, source
        self._facts: dict[str, Facts | None] = {}
        for change in changes:
            self._facts.setdefault(change.session_id, change.before)
        self._changed = set(self._facts)  # their facts are the replay's; the index has their last ones
        self._kids: dict[str, set[str]] = {}  # the changed sessions, by their parent now in the replay
        self._indexed_kids: dict[str, list[str]] = {}  # the others, by their parent, as read
        for session_id in self._changed:
            self._adopt(session_id, None, _parent(self._facts[session_id]))

    def apply(self, change: Change) -> tuple[bool, bool, list[tuple[str, Facts, bool]]]:
        """Whether the change's session was in the tree before it and is after, and the sessions
        below it that it took in or out (each with its facts and whether it is in now)."""
        session_id = change.session_id
        depth_before = self._depth(session_id)
        parent_before = _parent(self._facts_of(session_id))  # the replay's own word, as the log's says
        self._facts[session_id] = change.after
        self._adopt(session_id, parent_before, _parent(change.after))
        depth_after = self._depth(session_id)
        was_in, is_in = depth_before <= DESCENDANTS_MAX_DEPTH, depth_after <= DESCENDANTS_MAX_DEPTH
        carried: list[tuple[str, Facts, bool]] = []
        # Only through it can the others move, and the source's own place moves nobody below it.
        if depth_after != depth_before and (was_in or is_in) and session_id != self._source:
            members = self._subtree(session_id)
            for member, below in members.items():
                facts = self._facts_of(member)
                inside = (depth_before + below <= DESCENDANTS_MAX_DEPTH, depth_after + below <= DESCENDANTS_MAX_DEPTH)
                if inside[0] != inside[1] and facts is not None:
                    carried.append((member, facts, inside[1]))
        return was_in, is_in, carried

    def _adopt(self, session_id: str, old: str | None, new: str | None) -> None:
        if old is not None:
            self._kids.get(old, set()).discard(session_id)
        if new is not None:
            self._kids.setdefault(new, set()).add(session_id)

    def _depth(self, session_id: str) -> int:
        """The session's depth below the source now in the replay; past the bound when it is not in
        the tree (a walk up that ends, or loops, before reaching the source)."""
        node = session_id
        for depth in range(1, DESCENDANTS_MAX_DEPTH + 1):
            parent = _parent(self._facts_of(node))
            if parent is None:
                break
            if parent == self._source:
                return depth
            node = parent
        return DESCENDANTS_MAX_DEPTH + 1

    def _subtree(self, session_id: str) -> dict[str, int]:
        """The sessions below this one now in the replay, within the bound, each with its depth
        below it. Not those below the source, should it be among them (a cycle through it): they
        are in the tree by their own path, whatever this one's place."""
        found = {session_id: 0}
        level = [session_id]
        for below in range(1, DESCENDANTS_MAX_DEPTH + 1):
            parents = [parent for parent in level if parent != self._source]
            level = [child for parent in parents for child in self._children(parent) if child not in found]
            found.update(dict.fromkeys(level, below))
            if not level:
                break
        del found[session_id]
        return found

    def _children(self, parent: str) -> list[str]:
        """Its children now in the replay: those the index holds that no change names (they do not
        move in the window), and the changed ones that point to it now."""
        if parent not in self._indexed_kids:
            kids = []
            for session_id, *facts in self._conn.execute(
                "SELECT id, created_from_kind, created_from_source, agent_key, status FROM sessions "
                f"WHERE good = 1 AND {_CHILD_OF}",
                (parent,),
            ):
                if session_id not in self._changed:
                    self._facts[session_id] = Facts(*facts)
                    kids.append(session_id)
            self._indexed_kids[parent] = kids
        return self._indexed_kids[parent] + list(self._kids.get(parent, ()))

    def _facts_of(self, session_id: str) -> Facts | None:
        if session_id not in self._facts:
            row = self._conn.execute(
                "SELECT created_from_kind, created_from_source, agent_key, status FROM sessions WHERE id = ? AND good = 1",
                (session_id,),
            ).fetchone()
            self._facts[session_id] = None if row is None else Facts(*row)
        return self._facts[session_id]
