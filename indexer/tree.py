"""The trees of MCP workers, kept as links so that scope "descendants" reads like scope "children".

`tree_links (ancestor, updated_at_ms, descendant, depth)` holds, for every readable session, each
conversation above it along MCP `createdFrom` edges, at the smallest depth and no deeper than
DESCENDANTS_MAX_DEPTH. Its primary key puts one ancestor's descendants in answer order (newest
first, then by id), so a page of descendants is one range scan, however large the tree.

The links are computed by a recursive CTE walking up the edges, and kept in line inside the writer's
transaction (indexer.store): a session's own links when it is written, and those of everything below
it when its edge changes (it appears, disappears, or names another parent). A session above a
session that is not readable is not linked: its own file is what says whose child it is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

# How deep scope "descendants" goes: far beyond any real tree of workers, it bounds the walk through a
# hostile chain of files. A conversation deeper below the source is not listed (the tool says so).
DESCENDANTS_MAX_DEPTH = 64

_IDS_PER_STATEMENT = 500

# Walk up from the sessions named in `up_from`: a session's parent is its MCP source, and the walk goes
# on above a parent only while that parent is itself a readable session. A chain that loops is cut
# by the depth bound; GROUP BY keeps each ancestor at its smallest depth.
_LINK = """
    WITH RECURSIVE up(descendant, ancestor, depth) AS (
        SELECT id, created_from_source, 1 FROM sessions
            WHERE id IN (SELECT id FROM up_from) AND good = 1
              AND created_from_kind = 'mcp' AND created_from_source IS NOT NULL
        UNION ALL
        SELECT up.descendant, p.created_from_source, up.depth + 1 FROM up JOIN sessions AS p ON p.id = up.ancestor
            WHERE p.good = 1 AND p.created_from_kind = 'mcp' AND p.created_from_source IS NOT NULL
              AND up.depth < ?
    )
    INSERT INTO tree_links (ancestor, updated_at_ms, descendant, depth)
    SELECT up.ancestor, s.updated_at_ms, up.descendant, MIN(up.depth)
    FROM up JOIN sessions AS s ON s.id = up.descendant
    GROUP BY up.ancestor, up.descendant
"""


def create(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE tree_links (ancestor TEXT NOT NULL, updated_at_ms INTEGER NOT NULL, descendant TEXT NOT NULL, "
        "depth INTEGER NOT NULL, PRIMARY KEY (ancestor, updated_at_ms DESC, descendant)) WITHOUT ROWID"
    )
    conn.execute("CREATE INDEX tree_links_by_descendant ON tree_links (descendant)")


def edges(conn: sqlite3.Connection, ids: list[str]) -> dict[str, str | None]:
    """The edges these sessions have in the index now (absent: no readable row)."""
    found: dict[str, str | None] = {}
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        chunk = ids[start : start + _IDS_PER_STATEMENT]
        rows = conn.execute(
            "SELECT id, CASE WHEN created_from_kind = 'mcp' THEN created_from_source END FROM sessions "
            f"WHERE good = 1 AND id IN ({','.join('?' * len(chunk))})",
            chunk,
        )
        found.update(rows)
    return found


def update(conn: sqlite3.Connection, before: dict[str, str | None], ids: Iterable[str]) -> None:
    """After these sessions were written or removed: `before` is `edges()` read before the write."""
    ids = list(ids)
    after = edges(conn, ids)
    moved = [i for i in ids if (i in before, before.get(i)) != (i in after, after.get(i))]
    relink(conn, moved)
    # The rest kept their place in their trees; only their sort key may have changed.
    kept = set(after) - set(moved)
    conn.executemany(
        "UPDATE tree_links SET updated_at_ms = (SELECT updated_at_ms FROM sessions WHERE id = ?) WHERE descendant = ?",
        [(i, i) for i in sorted(kept)],
    )


def relink(conn: sqlite3.Connection, ids: list[str]) -> None:
    """Recompute the links of these sessions and of every session below them."""
    if not ids:
        return
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS up_from (id TEXT PRIMARY KEY) WITHOUT ROWID")
    conn.execute("DELETE FROM temp.up_from")
    conn.executemany("INSERT OR IGNORE INTO temp.up_from (id) VALUES (?)", [(i,) for i in ids])
    conn.execute(
        "INSERT OR IGNORE INTO temp.up_from (id) SELECT descendant FROM tree_links WHERE ancestor IN (SELECT id FROM temp.up_from)"
    )
    conn.execute("DELETE FROM tree_links WHERE descendant IN (SELECT id FROM temp.up_from)")
    conn.execute(_LINK, (DESCENDANTS_MAX_DEPTH,))
    conn.execute("DELETE FROM temp.up_from")


def relink_all(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM tree_links")
    relink(conn, [row[0] for row in conn.execute("SELECT id FROM sessions WHERE good = 1")])
