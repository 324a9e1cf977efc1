"""The WAL once a build or a server's first pass has settled (issue 12 item 4): at most
db.WAL_LIMIT_BYTES, here made small so that a small corpus writes more than it."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ccweb_index.indexer import db
from ccweb_index.server.cli import main
from ccweb_index.server.service import Service

from conftest import Corpus, session

LIMIT = 256 * 1024
FILES = 300


@pytest.fixture(autouse=True)
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db, "WAL_LIMIT_BYTES", LIMIT)
    monkeypatch.setattr(db, "SETTLE_WAIT_MS", 50)


def wal_size(db_path: Path) -> int:
    return os.path.getsize(f"{db_path}-wal")


def write_corpus(corpus: Corpus) -> None:
    # ~15 KB of input heads per session: the build writes ~4.5 MB, many times LIMIT.
    for n in range(FILES):
        corpus.write(f"s{n:04d}", session(*(f"{n} {i} " + "x" * 995 for i in range(15))))


def create_index(corpus: Corpus, db_path: Path) -> None:
    """An index of the (still empty) directory, so that a server can hold it open during the build."""
    build(corpus, db_path)


def build(corpus: Corpus, db_path: Path) -> None:
    result = CliRunner().invoke(main, ["build", "--sessions-dir", str(corpus.path), "--db", str(db_path)])
    assert result.exit_code == 0, result.output


@pytest.fixture
def server_reading(db_path: Path) -> Iterator[None]:
    """A server's connection: open throughout (so the WAL outlives the build's connection), reading
    in short transactions over and over while the build writes, as calls do."""
    stop = threading.Event()

    def calls() -> None:
        conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        try:
            while not stop.is_set():
                conn.execute("BEGIN")
                conn.execute("SELECT COUNT(*) FROM user_inputs").fetchone()
                stop.wait(0.002)
                conn.execute("COMMIT")
        finally:
            keep.append(conn)

    keep: list[sqlite3.Connection] = []
    thread = threading.Thread(target=calls)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        keep[0].close()


def test_a_build_leaves_at_most_the_limit_in_the_wal(corpus: Corpus, db_path: Path, request: pytest.FixtureRequest) -> None:
    create_index(corpus, db_path)
    write_corpus(corpus)
    request.getfixturevalue("server_reading")
    build(corpus, db_path)
    assert os.path.getsize(db_path) > 10 * LIMIT  # it wrote far more than the limit
    assert wal_size(db_path) <= LIMIT


def test_the_first_pass_of_a_server_leaves_at_most_the_limit_in_the_wal(
    corpus: Corpus, db_path: Path, request: pytest.FixtureRequest
) -> None:
    create_index(corpus, db_path)
    write_corpus(corpus)
    request.getfixturevalue("server_reading")
    service = Service(corpus.path, db_path, watch=True)
    try:
        service.start()
        assert os.path.getsize(db_path) > 10 * LIMIT
        assert wal_size(db_path) <= LIMIT
    finally:
        service.close()


def test_a_wal_a_reader_held_through_the_build_is_cut_back_by_later_writes(corpus: Corpus, db_path: Path) -> None:
    create_index(corpus, db_path)
    write_corpus(corpus)
    reader = sqlite3.connect(db_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM sessions").fetchone()  # a snapshot from before the build
    service = Service(corpus.path, db_path)
    try:
        service.indexer.reconcile()
        service.settle()  # waits SETTLE_WAIT_MS for the reader, then gives up
        assert wal_size(db_path) > 10 * LIMIT
        reader.execute("COMMIT")
        # What the watcher does as sessions change: the first write after the reader left lets the
        # WAL be copied in full, the next starts it over and cuts the file back to the limit.
        for n in range(2):
            corpus.write(f"s{n:04d}", session("changed"))
            service.indexer.refresh([f"s{n:04d}"])
        assert wal_size(db_path) <= LIMIT
    finally:
        service.close()
        reader.close()

