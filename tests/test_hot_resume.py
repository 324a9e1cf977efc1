"""Resuming a hot giant session reads only its end (issue 10, item 3).

- A grown file is resumed from its header, the last `REGION_BYTES` of its indexed prefix and what
  follows: the bytes read do not grow with the file.
- What that region check catches: an edit before it that changes the prefix's length shifts the
  region, so the file is parsed whole and the index is what a full build gives. (What it cannot
  catch, an edit of the same length before the region, is argued in docs/design.md, "Appends".)
- A checkpoint from an older index (no region, migration m008) is checked against the whole prefix.
- A watcher does not read again a racy row that another process (or thread) read after the change
  the watcher was told about; it does read one read before it.
- A file caught being written is not waited for when a watcher saw no write of it complete after
  the index's version was read (that version is then the latest complete one); it is otherwise.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_isolation import big_session, content, open_indexer, without_racy

from ccweb_index.indexer import load, sessionfile
from ccweb_index.indexer import torn as load_torn

from conftest import Corpus

MESSAGES = 40_000  # about 3 MB: well over REGION_BYTES and load._HEAD_BYTES together


@contextmanager
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The bytes every os.read / os.pread in this process returns meanwhile."""
    counted: list[int] = []
    real_read, real_pread = os.read, os.pread

    def read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        counted.append(len(data))
        return data

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        counted.append(len(data))
        return data

    with monkeypatch.context() as patch:
        patch.setattr(os, "read", read)
        patch.setattr(os, "pread", pread)
        yield counted


def fresh_build(corpus: Corpus, db: Path) -> dict[str, Any]:
    indexer = open_indexer(corpus.path, db)
    indexer.refresh(["hot"])
    indexer.handle.close()
    return without_racy(content(db), db)


def test_a_resume_reads_the_end_of_the_file_not_all_of_it(corpus: Corpus, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = big_session(MESSAGES)
    corpus.write("hot", doc)
    size = corpus.file("hot").stat().st_size
    indexer = open_indexer(corpus.path, db_path)
    indexer.refresh(["hot"])
    doc["messages"] += big_session(MESSAGES + 10)["messages"][MESSAGES:]
    corpus.write("hot", doc | {"status": "done"})
    with bytes_read(monkeypatch) as counted:
        stats = indexer.refresh(["hot"])
    assert stats.read == 1
    bound = sessionfile.REGION_BYTES + load._HEAD_BYTES + 64 * 1024
    assert sum(counted) < bound < size, f"read {sum(counted)} bytes of a {size}-byte file to resume it"
    indexer.handle.close()
    assert without_racy(content(db_path), db_path) == fresh_build(corpus, tmp_path / "fresh.sqlite")


@pytest.mark.parametrize("edit", ["longer", "shorter"])
def test_an_edit_far_before_the_cut_that_moves_the_prefix_is_parsed_whole(
    corpus: Corpus, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    doc = big_session(MESSAGES)
    corpus.write("hot", doc)
    indexer = open_indexer(corpus.path, db_path)
    indexer.refresh(["hot"])
    first = doc["messages"][0]
    first["content"] = "an edited first input, longer" if edit == "longer" else "m"
    doc["messages"].append({"id": "new", "role": "user", "content": "new input"})
    corpus.write("hot", doc)
    whole: list[int] = []
    real = load.parse_session
    monkeypatch.setattr(load, "parse_session", lambda data, **kw: whole.append(len(data)) or real(data, **kw))
    indexer.refresh(["hot"])
    assert whole, "an edit that moved the prefix was resumed over"
    indexer.handle.close()
    assert without_racy(content(db_path), db_path) == fresh_build(corpus, tmp_path / "fresh.sqlite")


def test_a_checkpoint_without_a_region_is_checked_against_the_whole_prefix(corpus: Corpus, db_path: Path, tmp_path: Path) -> None:
    """An index upgraded by m008 holds checkpoints with no region: an edit of the same length at the
    start of the prefix (which a region check could not see) is still caught, as before m008."""
    doc = big_session(MESSAGES)
    corpus.write("hot", doc)
    indexer = open_indexer(corpus.path, db_path)
    indexer.refresh(["hot"])
    indexer.handle.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("UPDATE checkpoints SET region = NULL").rowcount == 1
    doc["messages"][0]["content"] = "MESSAGE 0"  # as long as "message 0"
    doc["messages"].append({"id": "new", "role": "user", "content": "new input"})
    corpus.write("hot", doc)
    indexer = open_indexer(corpus.path, db_path)
    indexer.refresh(["hot"])
    indexer.handle.close()
    after = without_racy(content(db_path), db_path)
    assert after == fresh_build(corpus, tmp_path / "fresh.sqlite")
    assert after["checkpoints"][0][3] is not None, "the new checkpoint has a region"


def test_a_watcher_does_not_read_again_what_another_process_read_after_the_change(corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus.write("hot", big_session(MESSAGES))
    first, second = open_indexer(corpus.path, db_path), open_indexer(corpus.path, db_path)  # two processes' handles
    first.refresh(["hot"])
    seen_before_the_read = time.time_ns()
    corpus.write("hot", big_session(MESSAGES + 10, status="done"))
    first.refresh(["hot"])  # the row is racy: just written
    assert second.refresh(["hot"], seen={"hot": seen_before_the_read}).read == 0, "read again"
    assert second.refresh(["hot"], seen={"hot": time.time_ns()}).read == 1, "a change seen after the read was trusted"
    assert second.refresh(["hot"]).read == 1, "a racy row was trusted without a watcher's word"
    first.handle.close()
    second.handle.close()


# --- a file being written, when the index is known to hold its latest complete version --------------


def test_a_torn_file_whose_row_is_its_latest_version_is_not_waited_for(corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watcher saw the last write complete before the row's version was read: a torn read now is a
    write in flight, and the version before it is the latest complete one. Nothing is recorded, no
    time is spent waiting; with a completed write seen after the read, the torn-write wait runs."""
    corpus.write("s", big_session(3))
    indexer = open_indexer(corpus.path, db_path)
    completed_before = time.time_ns()
    indexer.refresh(["s"])  # a racy read: it records when it began
    before = content(db_path)
    corpus.write("s", b'{"title": "half-writ')
    waited: list[str] = []
    real_settle = load_torn.TornWrites.settle

    def settle(self: Any, loaded: Any, *args: Any) -> Any:
        waited.append(loaded.session_id)
        return real_settle(self, loaded, *args)

    monkeypatch.setattr(load_torn.TornWrites, "settle", settle)
    stats = indexer.refresh(["s"], written=lambda _: completed_before)
    assert stats.writing == {"s"} and waited == [] and stats.read == 0
    assert content(db_path) == before, "a write in flight was recorded"
    stats = indexer.refresh(["s"], written=lambda _: time.time_ns())
    assert waited == ["s"] and stats.read == 1 and not stats.writing
    indexer.handle.close()


def test_a_big_file_being_written_is_not_waited_for_when_its_row_is_current(corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = big_session(MESSAGES)
    corpus.write("hot", doc)
    indexer = open_indexer(corpus.path, db_path)
    completed_before = time.time_ns()
    indexer.refresh(["hot"])
    before = content(db_path)
    data = corpus.file("hot").read_bytes()
    corpus.write("hot", data[: len(data) - 200])  # truncated, then written: the end is not there yet
    monkeypatch.setattr(load, "_moved_on", lambda *args: True)  # and its writer is still at it
    whole: list[int] = []
    real = load.parse_session
    monkeypatch.setattr(load, "parse_session", lambda data, **kw: whole.append(len(data)) or real(data, **kw))
    stats = indexer.refresh(["hot"], written=lambda _: completed_before)
    assert stats.writing == {"hot"} and whole == [] and content(db_path) == before
    stats = indexer.refresh(["hot"])  # without a watcher's word: waited for, then parsed whole
    assert not stats.writing and whole
    indexer.handle.close()
