"""The build: parallel loading gives the same index as loading in-process, and survives dead workers."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccweb_index.indexer import db as dbmod
from ccweb_index.indexer import load
from ccweb_index.server.service import Service

from conftest import Corpus, session


def make_corpus(corpus: Corpus) -> None:
    for n in range(40):
        inputs = [f"request {n}.{k} 你好 🚀" for k in range(n % 7)]
        source = {"kind": "mcp", "sourceSessionId": "s0"} if n % 3 == 0 else None
        corpus.write(f"s{n}", session(*inputs, updated=1795939200000 + n, created_from=source, agent=["claude", "codex"][n % 2]))
    corpus.write("torn", b'{"messages": [')
    corpus.write("list", b"[]")
    (corpus.path / "skip.json.tmp").write_text("{}")


def index_rows(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    conn = sqlite3.connect(db)
    columns = "id, error, good, title, agent, status, created_at_ms, updated_at_ms, created_from_kind, created_from_source, user_input_count"
    sessions = conn.execute(f"SELECT {columns} FROM sessions ORDER BY id").fetchall()
    inputs = conn.execute("SELECT * FROM user_inputs ORDER BY session_id, seq").fetchall()
    conn.close()
    return sessions, inputs


def build(corpus: Corpus, db: Path) -> None:
    svc = Service(corpus.path, db)
    svc.start()
    svc.close()


def test_parallel_build_equals_in_process_build(corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_corpus(corpus)
    build(corpus, tmp_path / "serial.sqlite")
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "_CHUNK_FILES", 3)
    calls: list[int] = []
    real = load._load_in_workers
    monkeypatch.setattr(load, "_load_in_workers", lambda *a: calls.append(1) or real(*a))
    build(corpus, tmp_path / "parallel.sqlite")
    assert calls, "the parallel path was not taken"
    serial, parallel = index_rows(tmp_path / "serial.sqlite"), index_rows(tmp_path / "parallel.sqlite")
    assert parallel == serial
    assert len(serial[0]) == 42 and len(serial[1]) == sum(n % 7 for n in range(40))


def test_a_dead_worker_costs_nothing(corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_corpus(corpus)
    build(corpus, tmp_path / "serial.sqlite")
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "_CHUNK_FILES", 3)
    monkeypatch.setattr(load, "WORKER_COMMAND", [sys.executable, "-c", "import sys; sys.exit(3)"])
    build(corpus, tmp_path / "dead.sqlite")
    assert index_rows(tmp_path / "dead.sqlite") == index_rows(tmp_path / "serial.sqlite")


def test_a_worker_whose_parent_is_gone_ends_quietly(corpus: Corpus) -> None:
    """A server stopped mid-pass leaves its workers writing to a closed pipe; their stderr is the
    MCP client's log, where each printed a BrokenPipeError traceback (found by an independent test).
    A ^C on a terminal reaches the whole group: the worker leaves that to its parent."""
    make_corpus(corpus)
    worker = subprocess.Popen(load.WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=load.worker_environment())
    assert worker.stdin is not None and worker.stdout is not None
    chunk = [(f"s{n}", None) for n in range(40)]
    load._write_frame(worker.stdin.fileno(), (str(corpus.path), 1 << 20))
    load._write_frame(worker.stdin.fileno(), chunk)
    assert len(load._receive(worker.stdout.fileno())) == len(chunk)  # at work, past its start
    worker.send_signal(signal.SIGINT)
    worker.stdout.close()  # the parent is gone before the next answer
    load._write_frame(worker.stdin.fileno(), chunk)
    worker.stdin.close()
    assert worker.wait(timeout=30) == 0
    assert worker.stderr is not None and worker.stderr.read() == b""


@pytest.mark.parametrize("users", [{}, {"MALLOC_TRIM_THRESHOLD_": "0"}])
def test_workers_keep_their_memory_as_the_allocator_is_told(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, users: dict[str, str]
) -> None:
    """Parse workers start with glibc's allocator set to keep a file's worth of memory between files
    (load._WORKER_MALLOC), unless the user's environment says otherwise."""
    make_corpus(corpus)
    for name, value in users.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "environment"
    report = f"import json, os, sys; open({str(seen)!r}, 'a').write(json.dumps(dict(os.environ)) + chr(10)); sys.exit(3)"
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "WORKER_COMMAND", [sys.executable, "-c", report])
    build(corpus, tmp_path / "index.sqlite")
    environments = [json.loads(line) for line in seen.read_text().splitlines()]
    assert environments
    for environment in environments:
        assert {name: environment[name] for name in load._WORKER_MALLOC} == {**load._WORKER_MALLOC, **users}


def page_size(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def test_a_new_index_has_large_pages_and_an_old_one_keeps_its_own(corpus: Corpus, tmp_path: Path) -> None:
    make_corpus(corpus)
    build(corpus, tmp_path / "new.sqlite")
    assert page_size(tmp_path / "new.sqlite") == dbmod.PAGE_BYTES
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    build(corpus, old)
    assert page_size(old) == 4096
    assert index_rows(old) == index_rows(tmp_path / "new.sqlite")


def test_a_sweep_finds_exactly_the_files_out_of_line(corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-directory check (files.sweep_sessions against store.out_of_line): a file rewritten,
    a file added, a file deleted and a racy row are due; every other file is not. A sweep that missed
    one would leave that answer stale; one that flagged the rest would read every file again."""
    from ccweb_index.indexer import files, store

    monkeypatch.setattr(files, "RACY_WINDOW_NS", 50_000_000)
    old = 1_700_000_000_000_000_000
    for name in ("same", "rewritten", "deleted", "racy"):
        corpus.write(name, session(name, updated="2026-11-01T00:00:00Z"), mtime_ns=old)
    time.sleep(2 * files.RACY_WINDOW_NS / 1e9)  # past the racy window of their ctimes: the rows are settled
    build(corpus, db_path)
    conn = sqlite3.connect(db_path)
    try:
        assert store.out_of_line(conn, files.sweep_sessions(str(corpus.path))) == set()
        corpus.write("rewritten", session("rewritten, longer now", updated="2026-11-02T00:00:00Z"), mtime_ns=old)
        corpus.write("added", session("added", updated="2026-11-02T00:00:00Z"), mtime_ns=old)
        corpus.delete("deleted")
        conn.execute("UPDATE sessions SET racy = 1 WHERE id = 'racy'")
        conn.commit()
        assert store.out_of_line(conn, files.sweep_sessions(str(corpus.path))) == {"rewritten", "added", "deleted", "racy"}
    finally:
        conn.close()
