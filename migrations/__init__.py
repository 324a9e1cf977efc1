"""The index schema, as named, ordered sqlite-utils migrations.

Never edit a migration that has shipped: add a new one. An index written by an older version is
upgraded in place by applying the ones it lacks; the index is a cache, so a migration may also drop
and rebuild data, as long as it leaves a schema the code below can fill again from the files.
"""

from __future__ import annotations

from sqlite_utils import Database, Migrations

from ccweb_index.indexer import tree
from ccweb_index.indexer.stored import STORED_CHARS_KEY, STORED_INPUT_CHARS, stored_head

migrations = Migrations("ccweb-index")


@migrations()
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


@migrations()
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


@migrations()
def m003_meta(db: Database) -> None:
    # Index-wide facts: which directory this index is for, the directory's stat signature at the
    # last listing (to notice files added or removed without listing again), the last reconcile.
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID")


@migrations()
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
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (STORED_CHARS_KEY, STORED_INPUT_CHARS))


@migrations()
def m005_tree_links(db: Database) -> None:
    # Each readable session's MCP ancestors, in answer order per ancestor (indexer.tree), so that
    # scope "descendants" reads one range like scope "children" does, however large the tree.
    tree.create(db.conn)
    tree.relink_all(db.conn)
