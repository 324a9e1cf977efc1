"""A grown file's incremental re-index (issue 10, item 3) under the faults of items 1 and 5.

- A read that fails "not now" (EMFILE) while a checkpointed file is resumed records nothing: not
  the new signature, not an error, not a new checkpoint. The file stays due, and the next look
  resumes it from the checkpoint it had.
- A torn read of a checkpointed file is retried within the pass's bound, and the retry resumes it
  from its checkpoint when the write completes, rather than parsing it whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_isolation import big_session, content, open_indexer, without_racy
from test_torn_writes import FakeTime
from test_transient_errors import Shortage

from ccweb_index.indexer import load, refresh
from ccweb_index.indexer.sessionfile import parse_session
from ccweb_index.indexer.torn import TornWrites

from conftest import Corpus


def whole_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the files parsed whole from now on (a resume is not a whole parse)."""
    sizes: list[int] = []

    def counted(data: bytes, **kwargs: Any) -> Any:
        sizes.append(len(data))
        return parse_session(data, **kwargs)

    monkeypatch.setattr(load, "parse_session", counted)
    return sizes


def test_a_shortage_while_resuming_records_nothing(corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "CHECKPOINT_MIN_BYTES", 0)
    shortage = Shortage(monkeypatch, corpus.path)
    corpus.write("hot", big_session(50))
    indexer = open_indexer(corpus.path, db_path)
    indexer.refresh(["hot"])
    before = content(db_path)
    assert before["checkpoints"], "the test needs a checkpointed file"

    corpus.write("hot", big_session(60, status="done"))
    with shortage.during():
        stats = indexer.refresh(["hot"])
    assert shortage.failed and "hot" in stats.deferred
    assert content(db_path) == before, "a read that failed for the environment's reasons was recorded"

    whole = whole_parses(monkeypatch)
    stats = indexer.refresh(["hot"])
    assert not stats.deferred and stats.read == 1
    assert whole == [], "the file was parsed whole instead of resumed from its checkpoint"
    indexer.handle.close()
    assert same_as_a_fresh_build(corpus, db_path)


def test_a_torn_read_of_a_checkpointed_file_is_retried_by_resuming(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "CHECKPOINT_MIN_BYTES", 0)
    fake = FakeTime()

    class WithFakeTime(TornWrites):
        def __init__(self, sessions_dir: str, max_bytes: int, **_: Any) -> None:
            super().__init__(sessions_dir, max_bytes, clock=fake.clock, sleep=fake.sleep)

    monkeypatch.setattr(refresh, "TornWrites", WithFakeTime)
    corpus.write("hot", big_session(50))
    indexer = open_indexer(corpus.path, db_path)
    indexer.refresh(["hot"])

    corpus.write("hot", big_session(60, status="done"))
    complete = corpus.file("hot").read_bytes()
    corpus.write("hot", complete[: len(complete) // 2])  # cc-web truncated it and wrote half

    def writer_finishes(pauses: int) -> None:
        if pauses == 3:
            corpus.write("hot", complete)

    fake.on_sleep = writer_finishes
    whole = whole_parses(monkeypatch)
    stats = indexer.refresh(["hot"])
    assert fake.pauses == 3 and stats.unreadable == 0
    assert len(complete) not in whole, "the completed write was parsed whole, not resumed"
    indexer.handle.close()
    assert same_as_a_fresh_build(corpus, db_path)


def same_as_a_fresh_build(corpus: Corpus, db_path: Path) -> bool:
    fresh_db = db_path.with_name("fresh.sqlite")
    fresh = open_indexer(corpus.path, fresh_db)
    fresh.refresh(["hot"])
    fresh.handle.close()
    return bool(without_racy(content(db_path), db_path) == without_racy(content(fresh_db), fresh_db))
