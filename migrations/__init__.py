"""The index schema, as named, ordered sqlite-utils migrations.

Never edit a migration that has shipped: add a new one. An index written by an older version is
upgraded in place by applying the ones it lacks; the index is a cache, so a migration may also drop
and rebuild data, as long as it leaves a schema the code below can fill again from the files.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ccweb_index.indexer import stored, tree
from ccweb_index.indexer.stored import STORED_CHARS_KEY, stored_head

if TYPE_CHECKING:
    from sqlite_utils import Database, Migrations

# The migrations are registered with sqlite-utils only when one is to be run (`migrations`, below):
# opening an index that has them all (indexer.db) compares its record with NAMES, without importing
# sqlite-utils, a tenth of a no-op build of 100,000 sessions.
MIGRATION_SET = "ccweb-index"
_STEPS: list[Callable[[Database], None]] = []


def _step(fn: Callable[[Database], None]) -> Callable[[Database], None]:
    _STEPS.append(fn)
    return fn


@_step
def m001_sessions(db: Database) -> None:
    # One row per session file seen. The stat signature (ino, size, mtime_ns, ctime_ns) says which
    # file state the row describes; `racy` marks a state recorded too close to the file's last change
    # to be trusted (git's "racy clean"), so it is re-read before use. `good` says the metadata columns
    # hold a readable version: a file caught mid-write keeps its last good version with `error` set.
    db.execute(
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            ino INTEGER NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ctime_ns INTEGER NOT NULL,
            racy INTEGER NOT NULL,
            error TEXT,
            good INTEGER NOT NULL,
            title TEXT,
            agent TEXT,
            agent_key TEXT,
            status TEXT,
            created_at_ms INTEGER,
            updated_at_ms INTEGER,
            created_from_kind TEXT,
            created_from_source TEXT,
            user_input_count INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID
        """
    )
    # `scope: "all"` walks this in order and stops after `limit` rows.
    db.execute("CREATE INDEX sessions_by_updated ON sessions (updated_at_ms DESC, id) WHERE good = 1")
    # A children lookup touches only the children of one source, already in answer order.
    db.execute(
        "CREATE INDEX sessions_by_source ON sessions "
        "(created_from_source, created_from_kind, updated_at_ms DESC, id) WHERE good = 1"
    )


@_step
def m002_user_inputs(db: Database) -> None:
    # `seq` is the input's position among the session's user inputs, oldest first, so the newest N
    # are one descending range scan of the primary key.
    db.execute(
        """
        CREATE TABLE user_inputs (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            message_id TEXT,
            created_at_ms INTEGER,
            content TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """
    )


@_step
def m003_meta(db: Database) -> None:
    # Index-wide facts: which directory this index is for, the directory's stat signature at the
    # last listing (to notice files added or removed without listing again), the last reconcile.
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID")


@_step
def m004_input_heads(db: Database) -> None:
    # Keep of each input only what an answer can show (indexer.stored): its head, in `content`, and
    # its full length in code points. Both are computed by Python's str, as a fresh build does:
    # SQLite's length() and substr() stop at or miscount around a NUL, which an input may contain.
    # The file does not shrink (no VACUUM: a running server takes a shrunk index for a truncated
    # one); the freed pages are reused by later writes.
    db.conn.create_function("ccweb_head", 1, stored_head, deterministic=True)
    db.conn.create_function("ccweb_chars", 1, len, deterministic=True)
    db.execute("ALTER TABLE user_inputs ADD COLUMN original_chars INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE user_inputs SET original_chars = ccweb_chars(content), content = ccweb_head(content)")
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (STORED_CHARS_KEY, stored.STORED_INPUT_CHARS))


@_step
def m005_checkpoints(db: Database) -> None:
    # Where a large session file's messages array can be resumed from (indexer.sessionfile.Checkpoint),
    # describing the version whose user_inputs rows the index holds: written with them, in the same
    # transaction, and left alone when a later version is unreadable (the last good one stays).
    db.execute(
        """
        CREATE TABLE checkpoints (
            session_id TEXT PRIMARY KEY,
            cut INTEGER NOT NULL,
            crc INTEGER NOT NULL,
            messages INTEGER NOT NULL,
            inputs INTEGER NOT NULL,
            first_time INTEGER,
            newest_time INTEGER,
            times_known INTEGER NOT NULL
        ) WITHOUT ROWID
        """
    )


# The columns a listed row shows, and the file state it was read from: a row rewritten with all of
# these equal (a racy entry read again, a late commit of the same read) is no change.
_LISTED = (
    "ino", "size", "mtime_ns", "ctime_ns", "title", "agent", "agent_key", "status", "created_at_ms",
    "updated_at_ms", "created_from_kind", "created_from_source", "user_input_count",
)  # fmt: skip
# What a wait's selection looks at, recorded before and after each change (server.queries.Selectable).
_SELECTION = ("created_from_kind", "created_from_source", "agent_key", "status")
# Changes kept for `since` tokens; an older token answers "everything changed" (docs/decisions.md).
CHANGE_LOG_ROWS = 10_000


@_step
def m006_changes(db: Database) -> None:
    # The change sequence behind `changeToken` (ccweb_wait_for_conversations): one row per change to
    # a listed session (created, rewritten, deleted), numbered by AUTOINCREMENT so a number is never
    # reused, written by triggers in the very transaction that changes the row, whichever process
    # writes. A deleted session leaves its row here as its tombstone. `index_id` tells one index
    # from another (a rebuilt one is another): a token is only meaningful for the index that made it.
    before = ", ".join(f"before_{c}" for c in _SELECTION)
    after = ", ".join(f"after_{c}" for c in _SELECTION)
    db.execute(
        f"""
        CREATE TABLE changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            before_listed INTEGER NOT NULL, {before},
            after_listed INTEGER NOT NULL, {after}
        )
        """
    )
    differs = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in _LISTED)
    new_facts = ", ".join(f"NEW.{c}" for c in _SELECTION)
    old_facts = ", ".join(f"OLD.{c}" for c in _SELECTION)
    nulls = ", ".join("NULL" for _ in _SELECTION)

    def logged(name: str, event: str, when: str, values: str) -> None:
        db.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON sessions WHEN {when} BEGIN "
            f"INSERT INTO changes (session_id, before_listed, {before}, after_listed, {after}) VALUES ({values}); END"
        )

    # Rows are written by INSERT ... ON CONFLICT DO UPDATE (indexer.store), never INSERT OR REPLACE,
    # whose delete fires DELETE triggers or not depending on `recursive_triggers`.
    logged("sessions_created", "INSERT", "NEW.good = 1", f"NEW.id, 0, {nulls}, 1, {new_facts}")
    # A readable state replacing another that differs, or an unreadable one (a rewrite caught mid-write,
    # now complete). Recording an unreadable state keeps the last good version listed: no change.
    logged(
        "sessions_rewritten",
        "UPDATE",
        f"NEW.good = 1 AND NEW.error IS NULL AND (OLD.good = 0 OR OLD.error IS NOT NULL OR {differs})",
        f"NEW.id, OLD.good, {old_facts}, 1, {new_facts}",
    )
    logged("sessions_deleted", "DELETE", "OLD.good = 1", f"OLD.id, 1, {old_facts}, 0, {nulls}")
    db.execute(
        f"""
        CREATE TRIGGER changes_bounded AFTER INSERT ON changes
        BEGIN
            DELETE FROM changes WHERE seq <= NEW.seq - {CHANGE_LOG_ROWS};
        END
        """
    )
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('index_id', lower(hex(randomblob(8))))")


@_step
def m007_tree_links(db: Database) -> None:
    # Each readable session's MCP ancestors, in answer order per ancestor (indexer.tree), so that
    # scope "descendants" reads one range like scope "children" does, however large the tree.
    tree.create(db.conn)
    tree.relink_all(db.conn)


@_step
def m008_checkpoint_regions(db: Database) -> None:
    # The crc32 of the last bytes of a checkpoint's prefix (indexer.sessionfile.Checkpoint.region), so
    # that resuming a grown file reads its header, that region and its tail, not the whole prefix.
    # The checkpoints an older index holds have none (NULL): they are checked against the whole
    # prefix once, as before, and the next checkpoint of each file has one.
    db.execute("ALTER TABLE checkpoints ADD COLUMN region INTEGER")


@_step
def m009_covering_list_indexes(db: Database) -> None:
    # A list page read from its index alone: every column of a listed row (indexer.row.SessionRow)
    # and `good` (without it SQLite looks the row up in the table to test it, though the index holds
    # only good rows) ride along in both list orders, so the page's rows are one range of one
    # B-tree, not a search of the table per row (what it saves and costs: docs/benchmarks.md, "ninth
    # look"). Spelled out: a later column comes with a migration of its own, and
    # tests/test_index_db.py checks that the pages of scopes all and children read an index alone.
    db.execute("DROP INDEX sessions_by_updated")
    db.execute(
        "CREATE INDEX sessions_by_updated ON sessions (updated_at_ms DESC, id, title, agent, agent_key, status, "
        "created_at_ms, created_from_kind, created_from_source, user_input_count, good) WHERE good = 1"
    )
    db.execute("DROP INDEX sessions_by_source")
    db.execute(
        "CREATE INDEX sessions_by_source ON sessions (created_from_source, created_from_kind, updated_at_ms DESC, "
        "id, title, agent, agent_key, status, created_at_ms, user_input_count, good) WHERE good = 1"
    )


# Every migration's name, in order.
NAMES = tuple(fn.__name__ for fn in _STEPS)


@functools.cache
def _registered() -> Migrations:
    from sqlite_utils import Migrations

    registered = Migrations(MIGRATION_SET)
    for fn in _STEPS:
        registered()(fn)
    return registered


def __getattr__(name: str) -> Migrations:
    if name == "migrations":
        return _registered()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
