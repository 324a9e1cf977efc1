"""A broken index (issue #5): deleted, truncated, overwritten, locked, its -wal/-shm removed, the disk
under it full, processes killed mid-write, migrations interrupted.

The answers stay those of tests/reference.py for the files at the time of the call, the servers
keep running, and each says what happened once in its log. Two servers share the index: one with a
watcher, one without.
"""

from __future__ import annotations

import logging
import os
import random
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.indexer import db as dbmod
from ccweb_index.indexer import handle as handle_module
from ccweb_index.indexer import stored
from ccweb_index.indexer.errors import IndexBroken
from ccweb_index.indexer.handle import IndexHandle
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.migrations import migrations
from ccweb_index.server.service import Service

import reference
from conftest import (
    CCWEB_INDEX,
    Corpus,
    StdioClient,
    cli,
    index_held_elsewhere,
    server_pid,
    session,
    stdio_client_for,
    wait_until,
)
from faults import PipeLog, assert_consistent, clean_env, index_content, rlimit_prefix
from test_contract import same_answer

SOURCE = "orch"
INPUTS = "ccweb_list_user_inputs"
CONVERSATIONS = "ccweb_list_conversations"
CALLS: list[tuple[str, dict[str, Any]]] = [
    (INPUTS, {}),
    (INPUTS, {"conversationId": "kid0", "limit": 3}),
    (INPUTS, {"conversationId": "torn"}),
    (CONVERSATIONS, {}),
    (CONVERSATIONS, {"scope": "children"}),
    (CONVERSATIONS, {"agent": "codex", "limit": 2}),
]
REBUILT = re.compile(r"the index .*(rebuilding it from the session files|replacing it)")


def child(n: int, *texts: str, updated: str) -> dict[str, Any]:
    return session(*texts, updated=updated, created_from={"kind": "mcp", "sourceSessionId": SOURCE})


def make_corpus(corpus: Corpus, sessions: int = 12) -> None:
    corpus.write(SOURCE, session("plan", "ship", updated="2026-11-01T00:00:00Z"))
    for n in range(sessions):
        corpus.write(f"kid{n}", child(n, f"kid{n} part", updated=f"2026-11-02T00:{n:02d}:00Z"))
        corpus.write(f"other{n}", session(f"other{n}", agent="codex", updated=f"2026-10-01T00:{n:02d}:00Z"))
    corpus.write("torn", b'{"messages": [')


def change(corpus: Corpus, step: int) -> None:
    """What cc-web might do meanwhile: a new child, an in-place edit, a deletion."""
    corpus.write(f"new{step}", child(100 + step, f"new{step}", updated=f"2026-11-10T00:{step:02d}:00Z"), how="atomic")
    corpus.write("kid0", child(0, "kid0 part", f"kid0 step {step}", updated=f"2026-11-11T00:{step:02d}:00Z"), how="inplace")
    corpus.write(SOURCE, session("plan", "ship", f"orch step {step}", updated=f"2026-11-12T00:{step:02d}:00Z"))
    victim = corpus.file(f"other{step}")
    if victim.exists():
        victim.unlink()


def check(client: StdioClient | Service, corpus: Corpus) -> None:
    """Every call of CALLS, through a stdio client or an in-process service, answers as the reference."""
    for name, arguments in CALLS:
        oracle = reference.list_user_inputs if name == INPUTS else reference.list_conversations
        if isinstance(client, Service):
            result = client.call(name, arguments, SOURCE)
            answer = (result.payload, result.is_error)
        else:
            answer = client.call(name, arguments)
        try:
            same_answer(answer, oracle(corpus.path, arguments, SOURCE))
        except AssertionError as exc:
            raise AssertionError(f"{name} {arguments}: {exc}") from None


@contextmanager
def two_servers(corpus: Corpus, db: Path, logs: Path, **kwargs: Any) -> Iterator[list[StdioClient]]:
    """A server with a watcher and one without, on one index, each logging to its own file."""
    with ExitStack() as stack:
        clients = []
        for name, args in (("watcher", ()), ("no-watcher", ("--no-watch",))):
            errlog = stack.enter_context(open(logs / f"{name}.log", "w"))
            clients.append(stack.enter_context(stdio_client_for(corpus.path, db, source=SOURCE, args=args, errlog=errlog, **kwargs)))
        yield clients


def rebuild_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if REBUILT.search(line)]


def fresh_build_content(corpus: Corpus, where: Path) -> Any:
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(where))
    assert result.returncode == 0, result.stderr
    return index_content(where)


# --- damage under running servers -----------------------------------------------------------------


def damage(db: Path, how: str) -> None:
    if how == "deleted":
        db.unlink()
    elif how == "deleted-with-wal-and-shm":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    elif how == "truncated-to-0":
        os.truncate(db, 0)
    elif how == "truncated-to-100":
        os.truncate(db, 100)
    elif how == "replaced-by-garbage":
        tmp = db.with_suffix(".tmp")
        tmp.write_bytes(os.urandom(8192))
        os.replace(tmp, db)
    elif how == "wal-and-shm-removed":
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink()
    elif how == "garbage-in-place":
        with open(db, "r+b") as f:  # same inode, same size: only SQLite itself can notice
            f.write(b"garbage!" * (os.fstat(f.fileno()).st_size // 8))
    else:
        raise ValueError(how)


DAMAGE = [
    "deleted", "deleted-with-wal-and-shm", "truncated-to-0", "truncated-to-100", "replaced-by-garbage",
    "wal-and-shm-removed", "garbage-in-place",
]  # fmt: skip


@pytest.mark.parametrize("how", DAMAGE)
def test_index_damaged_under_running_servers(tmp_path: Path, how: str) -> None:
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus)
    db = tmp_path / "index" / "index.sqlite"
    with two_servers(corpus, db, tmp_path) as servers:
        for server in servers:
            check(server, corpus)
        # Pages still in the WAL shadow the main file (damage to it would go unseen, and be repaired
        # by the next checkpoint): checkpoint first, as happens routinely.
        checkpoint = sqlite3.connect(db)
        assert checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        checkpoint.close()
        damage(db, how)
        for step in range(3):
            change(corpus, step)
            for server in servers:
                check(server, corpus)
    for name in ("watcher", "no-watcher"):
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]
        lines = rebuild_lines(tmp_path / f"{name}.log")
        assert len(lines) == 1, f"{name}: {lines or text[-2000:]}"
    # The index left behind is sound, and says what a fresh build says.
    assert_consistent(db)
    assert fresh_build_content(corpus, db) == fresh_build_content(corpus, tmp_path / "fresh.sqlite")


def a_write_that_failed(tmp_path: Path) -> tuple[IndexHandle, Path, IndexBroken]:
    """An open handle on a built index, and the failure a write on it met: SQLite's own NOTADB."""
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus)
    db = tmp_path / "index" / "index.sqlite"
    handle = IndexHandle(db, str(corpus.path))
    with handle.lock:
        assert handle.open()
    Indexer(handle).reconcile()
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a database" * 1000)
    with pytest.raises(IndexBroken) as write_failed:
        with handle.connection():
            sqlite3.connect(garbage).execute("SELECT * FROM sqlite_master")
    return handle, db, write_failed.value


def test_a_failure_about_a_replaced_index_is_not_taken_for_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The applier's write meets the damage ("file is not a database") and leaves the lock; before
    it says so, a call's look sees the truncated file and replaces the index. The write's failure is
    about the index replaced: it must neither replace the new one nor be said again (a flake of the
    test above, [truncated-to-0], under load: two rebuild lines)."""
    handle, db, late = a_write_that_failed(tmp_path)
    caplog.set_level(logging.INFO, logger="ccweb_index")
    damage(db, "truncated-to-0")
    with handle.lock:
        handle.ready()  # the call's look: replaced, and said
    Indexer(handle).reconcile()
    handle.failed(late, background=True)  # the applier, late
    with handle.lock:
        handle.ready()
    assert not handle.needs_reconcile, "the sound new index was replaced too"
    assert len([r for r in caplog.records if REBUILT.search(r.getMessage())]) == 1, caplog.text
    assert handle.fault is None, handle.fault


def test_a_failure_said_while_the_index_is_being_replaced_is_not_taken_for_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same late failure, said while the call's look is still opening the new index (opening
    may wait for another process's, and migrate): it was taken for the index still in place, said
    a second time, and marked the new one for replacement once the open was done (an independent
    review)."""
    handle, db, late = a_write_that_failed(tmp_path)
    real_open = handle_module.open_handle

    def open_with_a_late_failure(*args: Any, **kwargs: Any) -> Any:
        applier = threading.Thread(target=handle.failed, args=(late,), kwargs={"background": True})
        applier.start()
        applier.join(30)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(handle_module, "open_handle", open_with_a_late_failure)
    caplog.set_level(logging.INFO, logger="ccweb_index")
    damage(db, "truncated-to-0")
    with handle.lock:
        handle.ready()
    monkeypatch.setattr(handle_module, "open_handle", real_open)
    Indexer(handle).reconcile()
    with handle.lock:
        handle.ready()
    assert not handle.needs_reconcile, "the sound new index was replaced too"
    assert len([r for r in caplog.records if REBUILT.search(r.getMessage())]) == 1, caplog.text


def hold_lock(db: Path, *, exclusive_mode: bool = False) -> subprocess.Popen[str]:
    """Another process holding the index's write lock (and, in exclusive locking mode, all reads)
    until `release` (no fixed hold time: the test says when it is done)."""
    code = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        + ("c.execute('PRAGMA locking_mode = EXCLUSIVE')\n" if exclusive_mode else "")
        + "c.execute('BEGIN EXCLUSIVE')\n"
        "c.execute(\"INSERT INTO meta (key, value) VALUES ('lock-holder', 1) ON CONFLICT (key) DO NOTHING\")\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "c.execute('ROLLBACK')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def release(holder: subprocess.Popen[str]) -> None:
    holder.communicate("\n", timeout=60)
    assert holder.returncode == 0


# A busy timeout far shorter than the default, for servers started under a held lock: each call then
# gives up on the lock quickly (and answers from the files) instead of waiting BUSY_TIMEOUT_MS.
SHORT_BUSY_TIMEOUT_MS = 200


def test_index_locked_by_another_process(tmp_path: Path) -> None:
    """BEGIN EXCLUSIVE held elsewhere beyond the busy timeout: calls answer from the files (after at
    most the busy timeout), correctly, with no error; logged once; the index is used again after."""
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus)
    db = tmp_path / "index" / "index.sqlite"
    short = {"CCWEB_INDEX_BUSY_TIMEOUT_MS": str(SHORT_BUSY_TIMEOUT_MS)}
    with two_servers(corpus, db, tmp_path, env=short) as servers:
        for server in servers:
            check(server, corpus)
        holder = hold_lock(db)
        try:
            errors: list[BaseException] = []

            def rounds(server: StdioClient, offset: int) -> None:
                try:
                    for _ in range(2):
                        check(server, corpus)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            change(corpus, 0)
            threads = [threading.Thread(target=rounds, args=(server, n)) for n, server in enumerate(servers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert errors == [], errors
            assert holder.poll() is None, "the lock holder ended before the calls were done"
        finally:
            release(holder)
        change(corpus, 1)

        def index_used_again() -> bool:
            for server in servers:  # right answers all along, from the files while the back-off lasts
                check(server, corpus)
            conn = sqlite3.connect(db)
            try:
                return conn.execute("SELECT COUNT(*) FROM sessions WHERE id = 'new1'").fetchone() == (1,)
            finally:
                conn.close()

        # Calls that gave up quickly and often have backed off (up to 30 s): wait it out.
        assert wait_until(index_used_again, timeout=60), "the index was not used again"
    for name in ("watcher", "no-watcher"):
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]
        assert text.count("is locked (database is locked)") == 1, text[-3000:]


def test_a_call_kept_from_the_index_by_its_own_process_answers_from_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another thread of the same process (e.g. a long initial build) holds the index for longer than
    a call waits for it: the call answers from the files, correctly, and the index is used again."""
    from ccweb_index.server import from_index

    monkeypatch.setattr(from_index, "LOCK_WAIT_SECONDS", 0.2)
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus, sessions=2)
    svc = Service(corpus.path, tmp_path / "index.sqlite")
    svc.start()
    try:
        with index_held_elsewhere(svc):
            change(corpus, 0)
            caplog.set_level(logging.DEBUG, logger="ccweb_index")
            check(svc, corpus)
        assert svc.handle.is_open, "the index was given up for a lock held by the process itself"
        change(corpus, 1)
        result = svc.call(CONVERSATIONS, {}, SOURCE)
        same_answer((result.payload, result.is_error), reference.list_conversations(corpus.path, {}, SOURCE))
    finally:
        svc.close()
    assert "Traceback" not in caplog.text


def room_for_a_new_index(tmp_path: Path) -> int:
    """The largest file that creating an empty index writes (its WAL, as the migrations leave it)."""
    scratch = tmp_path / "scratch"
    (scratch / "sessions").mkdir(parents=True)
    index = dbmod.open_handle(scratch / "index" / "index.sqlite", str(scratch / "sessions"))
    try:
        return max(path.stat().st_size for path in (scratch / "index").iterdir())
    finally:
        index.close()


# What each limit lets the server do, as the first (and only) thing it says about the index.
NO_ROOM, ROOM_FOR_PART = "cannot open the index", "cannot be used"


@pytest.mark.parametrize("room", [NO_ROOM, ROOM_FOR_PART], ids=["no-room-at-all", "room-for-part"])
def test_disk_full_under_the_index(tmp_path: Path, room: str) -> None:
    """RLIMIT_FSIZE makes writes past a size fail, as a full disk does: with no room, the index cannot
    even be created; with room for part, it is created but cannot take the inputs (its watcher's first
    reconcile fails, and must not be lost: it is done once there is room)."""
    # Room for part: a new index fits, with a margin; the inputs' stored heads take twice that.
    limit = 0 if room == NO_ROOM else room_for_a_new_index(tmp_path) * 5 // 4
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus, sessions=40)
    bulk = 2 * limit // (40 * stored.STORED_INPUT_CHARS) + 1  # inputs per bulk session
    filler = "x" * 2 * stored.STORED_INPUT_CHARS
    for n in range(40):
        corpus.write(f"bulk{n}", session(*[f"bulk{n} {k} {filler}" for k in range(bulk)], updated="2026-09-01T00:00:00Z"))
    db = tmp_path / "index" / "index.sqlite"
    log = PipeLog()  # its stderr must not be a file: the limit would apply to it
    with stdio_client_for(corpus.path, db, source=SOURCE, errlog=log.file, prefix=rlimit_prefix(limit)) as client:
        for step in range(3):
            change(corpus, step)
            check(client, corpus)
        text = log.text
        assert "Traceback" not in text, text[-3000:]
        says = [line for line in text.splitlines() if "answering from the session files" in line]
        assert len(says) == 1 and room in says[0], text[-3000:]
        # Room again: the index is used (and filled) again.
        resource.prlimit(server_pid(db), resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

        def filled() -> bool:
            check(client, corpus)
            try:
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                try:
                    return conn.execute("SELECT COUNT(*) FROM sessions WHERE id LIKE 'bulk%'").fetchone()[0] == 40
                finally:
                    conn.close()
            except sqlite3.Error:
                return False

        assert wait_until(filled, timeout=60)
    log.close()
    assert "Traceback" not in log.text, log.text[-3000:]
    assert_consistent(db)


# --- processes killed mid-write -----------------------------------------------------------------------


def big_corpus(corpus: Corpus, n: int) -> None:
    for k in range(n):
        corpus.write(f"s{k}", session(*[f"s{k} input {j} " + "y" * 300 for j in range(6)], updated=f"2026-11-01T00:00:{k % 60:02d}Z"))


def stir(corpus: Corpus, rng: random.Random, n: int) -> None:
    """Rewrite, delete and create some sessions, so that the next build has work to do."""
    names = [p.stem for p in corpus.path.glob("*.json")]
    for name in rng.sample(names, min(60, len(names))):
        corpus.write(name, session(f"{name} rewritten {rng.random()}", updated="2026-11-20T00:00:00Z"), how=rng.choice(["inplace", "atomic"]))
    for name in rng.sample(names, min(10, len(names))):
        corpus.file(name).unlink(missing_ok=True)
    for _ in range(10):
        k = rng.randrange(n, 10 * n)
        corpus.write(f"s{k}", session(f"s{k} new", updated="2026-11-21T00:00:00Z"))


def _committed_sessions(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        try:
            return conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_kill_9_at_random_points_of_a_build(tmp_path: Path) -> None:
    """Builds killed at random points: while the first batches commit (found by watching the count
    grow, then a random extra delay lands inside a batch), then incremental builds over a corpus that
    keeps changing, each killed at a random moment; every state left behind is consistent, and a
    normal build after it gives the index a fresh build gives."""
    n = 5000
    corpus = Corpus(tmp_path / "sessions")
    big_corpus(corpus, n)
    db = tmp_path / "index" / "index.sqlite"
    rng = random.Random(5)
    partial = []
    for round_ in range(6):
        if round_ >= 2:
            stir(corpus, rng, n)
        proc = subprocess.Popen([CCWEB_INDEX, "build", "--sessions-dir", str(corpus.path), "--db", str(db)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())  # fmt: skip
        if round_ < 2:  # the cold build, twice: kill once some batches are in
            target = rng.randrange(200, n - 1500)
            while proc.poll() is None and _committed_sessions(db) < target:
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.02))
        else:
            time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if db.exists():
            assert_consistent(db)  # no half-written session, no orphan inputs, even before recovery
            partial.append(_committed_sessions(db))
    assert 0 < partial[0] < n, f"the first kill did not land mid-build: {partial}"
    assert fresh_build_content(corpus, db) == fresh_build_content(corpus, tmp_path / "fresh.sqlite")
    assert_consistent(db)


def _cookie_dirs(pid: int) -> list[Path]:
    parents = {Path(p) for p in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm", "/tmp") if p and os.path.isdir(p)}
    return [d for parent in parents for d in parent.glob(f"ccweb-index-cookies-{pid}-*")]


def test_kill_9_of_a_watcher_under_writes(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "sessions")
    big_corpus(corpus, 300)
    db = tmp_path / "index" / "index.sqlite"
    rng = random.Random(11)
    killed: list[int] = []
    for _ in range(3):
        watch = subprocess.Popen([CCWEB_INDEX, "watch", "--sessions-dir", str(corpus.path), "--db", str(db)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())  # fmt: skip
        # Killed once it has an index to leave behind (a busy machine can take longer than the sleep
        # below to start it; a kill before the file exists would test nothing).
        assert wait_until(db.exists, timeout=60), "the watcher made no index"
        time.sleep(rng.uniform(0.2, 1.0))
        deadline = time.monotonic() + rng.uniform(0.2, 1.5)
        while time.monotonic() < deadline:  # writes while it watches; killed in the middle of them
            stir(corpus, rng, 300)
        watch.send_signal(signal.SIGKILL)
        watch.wait()
        killed.append(watch.pid)
        assert_consistent(db)
        stir(corpus, rng, 300)  # and more while nothing watches
    # A normal start: watch (its first pass done and its SIGTERM handler set), then stop it cleanly.
    log = tmp_path / "watch.log"
    with open(log, "wb") as err:
        watch = subprocess.Popen([CCWEB_INDEX, "watch", "-v", "--sessions-dir", str(corpus.path), "--db", str(db)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=clean_env())  # fmt: skip
    try:
        assert wait_until(lambda: "watching" in log.read_text(errors="replace"), timeout=60), "the watcher did not start"
        assert wait_until(lambda: all(not _cookie_dirs(pid) for pid in killed), timeout=30), "cookie dirs of killed watchers left"
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
    stderr = log.read_text(errors="replace")
    assert watch.returncode == 0 and "Traceback" not in stderr, stderr
    assert_consistent(db)
    assert index_content(db) == fresh_build_content(corpus, tmp_path / "fresh.sqlite")


# --- migrations ------------------------------------------------------------------------------------------

_KILL_DURING_MIGRATION = """
import os, signal, sys
from pathlib import Path
from ccweb_index.migrations import migrations
from ccweb_index.indexer.db import open_index
target = sys.argv[3]
for m in migrations._migrations:
    if m.name == target:
        real = m.fn
        def killed(db, real=real):
            real(db)  # the migration's work is done, its record not yet committed
            os.kill(os.getpid(), signal.SIGKILL)
        m.fn = killed
open_index(Path(sys.argv[1]), sys.argv[2])
"""


def test_opening_reads_the_record_sqlite_utils_keeps() -> None:
    # An index with every one of NAMES recorded there is opened without importing sqlite-utils.
    from ccweb_index.migrations import MIGRATION_SET, NAMES

    assert NAMES == tuple(m.name for m in migrations._migrations)
    assert (MIGRATION_SET, dbmod._MIGRATIONS_TABLE) == (migrations.name, migrations.migrations_table)


@pytest.mark.parametrize("migration", [m.name for m in migrations._migrations])
def test_a_migration_killed_half_way_is_redone(tmp_path: Path, migration: str) -> None:
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus, sessions=3)
    db = tmp_path / "index.sqlite"
    sessions = os.path.realpath(corpus.path)
    if migration != migrations._migrations[0].name:  # an older index being upgraded
        conn = dbmod.connect(db)
        from sqlite_utils import Database

        migrations.apply(Database(conn), stop_before=migration)
        conn.close()
    result = subprocess.run([sys.executable, "-c", _KILL_DURING_MIGRATION, str(db), sessions, migration],
                            capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert result.returncode == -signal.SIGKILL, result.stderr
    conn = sqlite3.connect(db)
    names = [row[0] for row in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id")]
    conn.close()
    assert migration not in names, "the interrupted migration was recorded"
    svc = Service(corpus.path, db)
    svc.start()
    try:
        for name, arguments in CALLS:
            result_ = svc.call(name, arguments, SOURCE)
            oracle = reference.list_user_inputs if name == INPUTS else reference.list_conversations
            same_answer((result_.payload, result_.is_error), oracle(corpus.path, arguments, SOURCE))
    finally:
        svc.close()
    conn = sqlite3.connect(db)
    assert [row[0] for row in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id")] == [m.name for m in migrations._migrations]
    conn.close()
    assert_consistent(db)


def test_a_schema_left_half_made_without_its_record_is_rebuilt(tmp_path: Path) -> None:
    """A table created, its migration not recorded (as a crash in a non-transactional step would
    leave it): the migration cannot run again over it, so the index is rebuilt from the files."""
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus, sessions=3)
    db = tmp_path / "index.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
    conn.close()
    # Left by the run that crashed: a file never opened here is not rebuilt.
    Path(f"{db}.lock").write_bytes(dbmod.LOCK_SIGNATURE)
    svc = Service(corpus.path, db)
    svc.start()
    try:
        assert svc.handle.is_open
        result = svc.call(CONVERSATIONS, {"scope": "children"}, SOURCE)
        same_answer((result.payload, result.is_error), reference.list_conversations(corpus.path, {"scope": "children"}, SOURCE))
    finally:
        svc.close()
    assert_consistent(db)


def test_a_failed_commit_does_not_leave_the_connection_in_a_transaction(tmp_path: Path) -> None:
    """`write_transaction` used to leave a failed COMMIT's transaction open: every later BEGIN failed."""
    db = tmp_path / "x.sqlite"
    conn = dbmod.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("CREATE TABLE parent (id PRIMARY KEY)")
    conn.execute("CREATE TABLE child (p REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    conn.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.IntegrityError):
        with dbmod.write_transaction(conn):
            conn.execute("INSERT INTO child VALUES (1)")  # fails at COMMIT (deferred constraint)
    assert not conn.in_transaction
    with dbmod.write_transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (1,)
    conn.close()


def test_an_index_locked_at_start_is_waited_for_not_discarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds the index in exclusive locking mode (even reads wait) as a server
    starts: it answers from the files, never deletes the index, and uses it once it is free."""
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_MS", SHORT_BUSY_TIMEOUT_MS)
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus, sessions=2)
    db = tmp_path / "index.sqlite"
    assert cli("build", "--sessions-dir", str(corpus.path), "--db", str(db)).returncode == 0
    inode = db.stat().st_ino
    holder = hold_lock(db, exclusive_mode=True)
    svc = Service(corpus.path, db)
    try:
        try:
            svc.start()
            assert not svc.handle.is_open
            change(corpus, 0)
            check(svc, corpus)
        finally:
            release(holder)
        assert db.stat().st_ino == inode, "a locked index was deleted"
        change(corpus, 1)

        def answered_from_the_index() -> bool:
            result = svc.call(CONVERSATIONS, {}, SOURCE)
            same_answer((result.payload, result.is_error), reference.list_conversations(corpus.path, {}, SOURCE))
            return svc.handle.is_open

        assert wait_until(answered_from_the_index, timeout=30)
        assert db.stat().st_ino == inode
    finally:
        svc.close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM sessions WHERE id = 'new1'").fetchone() == (1,)
    conn.close()


def test_commands_that_answer_nothing_do_not_say_they_answer_from_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a lock, `build` said the server's "answering from the session files until it can be
    opened" before its own error, and `watch` said it as it went on (a new user's walk): neither
    answers anything. `build` says its error alone; `watch` says it tries again, and does."""
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_MS", SHORT_BUSY_TIMEOUT_MS)
    corpus = Corpus(tmp_path / "sessions")
    make_corpus(corpus, sessions=2)
    db = tmp_path / "index.sqlite"
    assert cli("build", "--sessions-dir", str(corpus.path), "--db", str(db)).returncode == 0
    log = tmp_path / "watch.log"
    holder = hold_lock(db, exclusive_mode=True)
    try:
        built = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
        with open(log, "wb") as err:
            env = {**clean_env(), "CCWEB_INDEX_BUSY_TIMEOUT_MS": str(SHORT_BUSY_TIMEOUT_MS)}
            watch = subprocess.Popen([CCWEB_INDEX, "watch", "--sessions-dir", str(corpus.path), "--db", str(db)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)  # fmt: skip
        try:
            assert wait_until(lambda: "watching" in log.read_text(errors="replace"), timeout=60), log.read_text()
        finally:
            release(holder)
        change(corpus, 0)
        assert wait_until(lambda: index_content(db) == fresh_build_content(corpus, tmp_path / "fresh.sqlite"), timeout=60)
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
    assert built.returncode == 1
    assert built.stderr.splitlines() == [f"Error: cannot open the index {db}: database is locked"]
    said = log.read_text(errors="replace")
    assert f"cannot open the index {db} (database is locked); trying again until it can be used" in said, said
    assert "answering" not in said and "Traceback" not in said, said


def test_a_connection_closed_by_a_replace_mid_call_is_no_internal_error(tmp_path: Path) -> None:
    """A call reads the handle's change count outside its lock; a thread that replaces a damaged index
    (the watcher's, a concurrent call's) may close that connection first. Under load this surfaced as
    `internal_error` (`sqlite3.ProgrammingError: Cannot operate on a closed database`); the call must
    answer, from a reopened index or from the files."""
    corpus = Corpus(tmp_path / "sessions")
    corpus.write("orch", session("hello", "again"))
    svc = Service(corpus.path, tmp_path / "index.sqlite")
    svc.start()
    try:
        before = svc.call("ccweb_list_user_inputs", {"conversationId": "orch"}, None)
        assert not before.is_error and before.payload["returnedCount"] == 2, before.payload
        index = svc.handle._index
        assert index is not None
        index.conn.close()  # as a replace does, between the call's start and its count
        result = svc.call("ccweb_list_user_inputs", {"conversationId": "orch"}, None)
        assert result == before
    finally:
        svc.close()
