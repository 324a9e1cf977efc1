"""The index database: migrations in order, upgrades in place, rebuilds from the files when broken."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlite_utils import Database

from ccweb_index.indexer.db import IndexMismatch, connect, default_db_path, open_index
from ccweb_index.migrations import migrations
from ccweb_index.server import queries
from ccweb_index.server.service import Service
from ccweb_index.server.tools import ConversationsRequest

from conftest import Corpus, cli, session

ALL_MIGRATIONS = [
    "m001_sessions", "m002_user_inputs", "m003_meta", "m004_input_heads", "m005_checkpoints", "m006_changes",
    "m007_tree_links", "m008_checkpoint_regions", "m009_covering_list_indexes",
]


def applied(path: Path) -> list[str]:
    return [m.name for m in migrations.applied(Database(sqlite3.connect(path)))]


def test_a_new_index_has_every_migration_in_order(corpus: Corpus, db_path: Path) -> None:
    open_index(db_path, str(corpus.path)).close()
    assert applied(db_path) == ALL_MIGRATIONS


def test_an_older_index_is_upgraded_in_place(corpus: Corpus, db_path: Path) -> None:
    corpus.write("a", session("hi", updated="2026-11-29T08:00:00Z"))
    db_path.parent.mkdir(parents=True)
    old = connect(db_path)
    migrations.apply(Database(old), stop_before="m003_meta")
    old.execute(
        "INSERT INTO sessions (id, ino, size, mtime_ns, ctime_ns, racy, good, user_input_count) "
        "VALUES ('kept', 1, 1, 1, 1, 0, 1, 0)"
    )
    old.close()
    assert applied(db_path) == ["m001_sessions", "m002_user_inputs"]

    conn = open_index(db_path, str(corpus.path))
    assert applied(db_path) == ALL_MIGRATIONS
    assert conn.execute("SELECT id FROM sessions").fetchall() == [("kept",)], "data survives the upgrade"
    conn.close()
    # and the service then brings it in line with the files
    svc = Service(corpus.path, db_path)
    svc.start()
    result = svc.call("ccweb_list_conversations", {}, None)
    assert [r["conversationId"] for r in result.payload["conversations"]] == ["a"]
    svc.close()


@pytest.mark.parametrize("scope", ["all", "children"])
@pytest.mark.parametrize("terms", [{}, {"agent_key": "codex"}, {"status_key": "idle"}, {"after": (2**40, "b")}])
def test_a_list_page_is_read_from_its_index_alone(corpus: Corpus, db_path: Path, scope: str, terms: dict) -> None:
    """m009: whatever the filters, a page of either list order never looks a row up in the table
    (the whole saving of its covering indexes; a column added to the rows and not to them ends it)."""
    corpus.write("a", session("hi", updated="2026-11-29T08:00:00Z"))
    conn = open_index(db_path, str(corpus.path))
    statements: list[str] = []
    conn.set_trace_callback(statements.append)  # the statement with its parameters in place
    source = "src" if scope == "children" else None
    request = ConversationsRequest(**{"scope": scope, "source": source, "limit": 20, "agent_key": None, "status_key": None, **terms})
    queries.conversations(conn, request, limit=21)
    conn.set_trace_callback(None)
    [statement] = statements
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}")]
    conn.close()
    assert plan and all("USING COVERING INDEX" in step for step in plan), plan


def test_an_index_without_tree_links_gains_them_from_its_rows(corpus: Corpus, db_path: Path) -> None:
    """m007 links the rows an older index holds: a tree answers before any file is read again."""
    mcp = {"kind": "mcp"}
    corpus.write("a", session("x", updated="2026-11-29T08:00:00Z", created_from={**mcp, "sourceSessionId": "src"}))
    corpus.write("b", session("x", updated="2026-11-29T09:00:00Z", created_from={**mcp, "sourceSessionId": "a"}))
    svc = Service(corpus.path, db_path)
    svc.start()
    svc.close()
    old = connect(db_path)
    old.execute("DROP TABLE tree_links")
    old.execute("DELETE FROM _sqlite_migrations WHERE name = 'm007_tree_links'")
    old.commit()
    old.close()
    conn = open_index(db_path, str(corpus.path))
    links = conn.execute("SELECT ancestor, descendant, depth FROM tree_links ORDER BY ancestor, descendant").fetchall()
    conn.close()
    assert links == [("a", "b", 1), ("src", "a", 1), ("src", "b", 2)]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty-header"])
def test_a_broken_index_is_rebuilt_from_the_files(corpus: Corpus, db_path: Path, damage: str) -> None:
    corpus.write("a", session("one", "two", updated="2026-11-29T08:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    svc.close()
    data = db_path.read_bytes()
    if damage == "garbage":
        db_path.write_bytes(b"this is not a database" * 100)
    elif damage == "truncated":
        db_path.write_bytes(data[:100])
    else:
        db_path.write_bytes(b"\0" * len(data))
    for suffix in ("-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)

    svc = Service(corpus.path, db_path)
    svc.start()
    result = svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None)
    svc.close()
    assert [i["content"] for i in result.payload["inputs"]] == ["one", "two"]


def test_an_index_whose_schema_is_not_the_migrations_is_rebuilt(corpus: Corpus, db_path: Path) -> None:
    """A column renamed under a migration this version does not know (a newer version's index): the
    first write failed with "has no column named" on every run, never rebuilt (found by an
    independent test)."""
    corpus.write("a", session("one", updated="2026-11-29T08:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    svc.close()
    conn = sqlite3.connect(db_path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(user_inputs)")]
    conn.execute(f"ALTER TABLE user_inputs RENAME COLUMN {columns[-1]} TO renamed_by_a_newer_version")
    conn.commit()
    conn.close()
    corpus.write("a", session("one", "two", updated="2026-11-29T09:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    result = svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None)
    again = svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None)
    svc.close()
    assert [i["content"] for i in result.payload["inputs"]] == ["one", "two"]
    assert again.payload == result.payload
    conn = sqlite3.connect(db_path)
    assert "renamed_by_a_newer_version" not in [row[1] for row in conn.execute("PRAGMA table_info(user_inputs)")]
    conn.close()


def test_a_file_that_is_not_an_index_is_left_as_it_is(corpus: Corpus, tmp_path: Path) -> None:
    """A --db given by mistake: a user's notes were made 0600, deleted as "a broken index" and
    replaced; another program's database got this one's tables written into it; a FIFO hung `call`
    forever in open(); /dev/null was made 0600 for the whole machine (found by an independent test).
    Each is refused before anything is opened, created or chmodded."""
    corpus.write("a", session("hi"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE bookmarks (url TEXT)")
    conn.commit()
    conn.close()
    fifo = tmp_path / "fifo.sqlite"
    os.mkfifo(fifo)
    link = tmp_path / "link.sqlite"
    link.symlink_to(notes)
    # Taken for ours when reading them failed: a damaged database, one with a journal beside it.
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(other.read_bytes()[:16] + b"\xff" * 5000)
    pending = tmp_path / "pending.sqlite"
    pending.write_bytes(b"")
    conn = sqlite3.connect(pending)
    conn.execute("VACUUM")  # an SQLite file with no table yet, its first one still in its journal
    conn.close()
    Path(f"{pending}-journal").write_bytes(b"\0" * 512)
    # From a second review: a view and nothing else; an application id; an empty `.lock` beside a
    # file (other programs leave them too); a symlink to a WAL database whose tables are all in its
    # -wal; an empty file beside another program's -wal.
    view, appid, locked, walled, blank = (tmp_path / f"{name}.sqlite" for name in ("view", "appid", "locked", "walled", "blank"))
    _sqlite(view, "CREATE VIEW settings AS SELECT 'dark' AS theme")
    _sqlite(appid, "PRAGMA application_id = 1234")
    locked.write_text("my other notes\n")
    Path(f"{locked}.lock").touch()
    walled_target = tmp_path / "elsewhere" / "app.db"
    walled_target.parent.mkdir()
    _wal_only(walled_target)
    walled.symlink_to(walled_target)
    blank.write_bytes(b"")
    Path(f"{blank}-wal").write_bytes(Path(f"{walled_target}-wal").read_bytes())
    files = (notes, other, damaged, pending, view, appid, locked, walled_target, Path(f"{walled_target}-wal"),
             Path(f"{blank}-wal"))  # fmt: skip
    for path in files:
        path.chmod(0o644)
    before = {path: (path.read_bytes(), path.stat().st_mode) for path in files}
    for path, reason in ((notes, "not an SQLite database"), (other, "holding bookmarks"),
                         (fifo, "not a regular file"), (link, "not an SQLite database"),
                         (damaged, "cannot be read"), (pending, "pending in its -journal"),
                         (view, "holding settings"), (appid, "an application id"),
                         (locked, "not an SQLite database"), (walled, "pending in its -wal"),
                         (blank, "pending in its -wal")):  # fmt: skip
        with pytest.raises(IndexMismatch, match=reason):
            open_index(path, str(corpus.path))
        result = cli("call", "ccweb_list_user_inputs", '{"conversationId": "a"}',
                     "--sessions-dir", str(corpus.path), "--db", str(path))  # fmt: skip
        assert result.returncode == 1 and reason in result.stderr, result.stderr
        assert path == locked or not Path(f"{path}.lock").exists()
        assert path in (walled, blank) or not Path(f"{path}-wal").exists()
    assert {path: (path.read_bytes(), path.stat().st_mode) for path in files} == before
    assert link.is_symlink() and not Path(f"{other}-shm").exists()
    assert Path(f"{locked}.lock").read_bytes() == b""


def _sqlite(path: Path, statement: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


def _wal_only(path: Path) -> None:
    """A WAL database whose table is still all in its -wal, as a program killed before any
    checkpoint leaves it."""
    script = (
        "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode = WAL');"
        " c.execute('PRAGMA wal_autocheckpoint = 0'); c.execute('CREATE TABLE secrets (x)');"
        " c.execute(\"INSERT INTO secrets VALUES ('s')\"); c.commit(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)


def test_an_older_versions_index_open_in_another_process_is_opened(corpus: Corpus, db_path: Path) -> None:
    """An index made before the .lock was signed, with a -wal beside it because a server of that
    version has it open: ours by the record of its migrations, which the main file holds."""
    corpus.write("a", session("hi"))
    open_index(db_path, str(corpus.path)).close()
    Path(f"{db_path}.lock").write_bytes(b"")  # as older versions left it
    holder = sqlite3.connect(db_path)
    holder.execute("CREATE TABLE IF NOT EXISTS meta_probe (x)")  # a write: the -wal has content
    holder.commit()
    try:
        assert Path(f"{db_path}-wal").stat().st_size > 0
        open_index(db_path, str(corpus.path)).close()
    finally:
        holder.close()
    assert Path(f"{db_path}.lock").read_bytes().startswith(b"ccweb-index")  # signed from now on


def test_an_index_of_another_directory_is_refused(tmp_path: Path, db_path: Path) -> None:
    first, second = Corpus(tmp_path / "one"), Corpus(tmp_path / "two")
    open_index(db_path, str(first.path)).close()
    with pytest.raises(IndexMismatch, match="belongs to the sessions directory"):
        open_index(db_path, str(second.path))


def test_another_directorys_index_put_in_place_is_said_once(
    tmp_path: Path, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Put at the path while a server runs, it is a configuration error as it is at start: answered
    around from the files, said once, with no traceback (it was an ERROR with a traceback per call,
    found by an independent test)."""
    mine, theirs = Corpus(tmp_path / "mine"), Corpus(tmp_path / "theirs")
    mine.write("a", session("one", updated="2026-11-29T08:00:00Z"))
    theirs.write("b", session("other", updated="2026-11-29T08:00:00Z"))
    other_db = tmp_path / "other.sqlite"
    build_svc = Service(theirs.path, other_db)
    build_svc.start()
    build_svc.close()
    svc = Service(mine.path, db_path, watch=False)
    svc.start()
    try:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        shutil.copy(other_db, db_path)
        for n in range(5):
            mine.write("a", session("one", f"more {n}", updated="2026-11-29T09:00:00Z"))
            result = svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None)
            assert [i["content"] for i in result.payload["inputs"]] == ["one", f"more {n}"]
    finally:
        svc.close()
    said = [r for r in caplog.records if "is not used: the index belongs to the sessions directory" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING", [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.levelname == "ERROR" or r.exc_info]


def test_default_location_is_per_directory_in_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (tmp_path / "link").symlink_to(a)
    assert default_db_path(a) == default_db_path(tmp_path / "link"), "keyed by the real path"
    assert default_db_path(a) != default_db_path(b)
    assert default_db_path(a).parent == tmp_path / "cache" / "ccweb-index"


def test_opening_waits_while_another_opener_holds_the_index(tmp_path: Path, db_path: Path) -> None:
    """Creating, migrating or rebuilding an index is serialised between processes by a lock file;
    an opener that finds it held waits (at most OPEN_LOCK_TIMEOUT_SECONDS), then opens normally."""
    import fcntl
    import threading
    import time

    corpus = Corpus(tmp_path / "sessions")
    db_path.parent.mkdir(parents=True)
    with open(f"{db_path}.lock", "a+b") as other:  # another open file description: flock conflicts
        fcntl.flock(other, fcntl.LOCK_EX)
        held = 0.3
        threading.Timer(held, fcntl.flock, (other, fcntl.LOCK_UN)).start()
        started = time.monotonic()
        conn = open_index(db_path, str(corpus.path))
        assert time.monotonic() - started >= held, "opened while another opener held the lock"
    assert applied(db_path) == [m.name for m in migrations._migrations]
    conn.close()
