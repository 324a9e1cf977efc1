"""Torn writes (issue 10, item 5): a file that had a good version, changed recently and does not
parse now is read again for at most TORN_WRITE_RETRY_SECONDS per pass before its last good version
stands in, so a write in flight that completes within the bound is answered, not a version the
file left long ago. Time is injected (a fake clock that the retry pauses advance), so the bound is
shown exactly and the test does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.indexer import files, load, refresh
from ccweb_index.indexer.torn import TORN_WRITE_PAUSE_SECONDS, TORN_WRITE_RETRY_SECONDS, TornWrites
from ccweb_index.server.service import Service

from conftest import Corpus, session

TORN = b'{"title": "t", "messages": [{"role": "user", "content": "half'


class FakeTime:
    """The retry's clock and sleep: sleeping advances the clock and runs `on_sleep`."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses = 0
        self.on_sleep: Callable[[int], None] = lambda pauses: None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.pauses += 1
        self.on_sleep(self.pauses)


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()

    class WithFakeTime(TornWrites):
        def __init__(self, sessions_dir: str, max_bytes: int, **_: Any) -> None:
            super().__init__(sessions_dir, max_bytes, clock=fake.clock, sleep=fake.sleep)

    # raising=False: the code before the retry existed had no TornWrites, and must fail the tests,
    # not their set-up.
    monkeypatch.setattr(refresh, "TornWrites", WithFakeTime, raising=False)
    return fake


def inputs(svc: Service, conversation_id: str) -> list[str]:
    result = svc.call("ccweb_list_user_inputs", {"conversationId": conversation_id}, None)
    assert not result.is_error, result.payload
    return [item["content"] for item in result.payload["inputs"]]


@pytest.fixture
def svc(corpus: Corpus, db_path: Path) -> Any:
    corpus.write("w1", session("version 1"))
    service = Service(corpus.path, db_path)
    service.start()
    assert inputs(service, "w1") == ["version 1"]
    yield service
    service.close()


def test_a_write_that_completes_within_the_bound_is_answered(svc: Service, corpus: Corpus, fake_time: FakeTime) -> None:
    corpus.write("w1", TORN)  # the writer has truncated the file and written half of version 2

    def writer_finishes(pauses: int) -> None:
        if pauses == 3:
            corpus.write("w1", session("version 2"))

    fake_time.on_sleep = writer_finishes
    assert inputs(svc, "w1") == ["version 2"]
    assert fake_time.pauses == 3


def test_a_write_that_does_not_complete_is_waited_for_no_longer_than_the_bound(
    svc: Service, corpus: Corpus, fake_time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    corpus.write("w1", TORN)
    started = fake_time.now
    assert inputs(svc, "w1") == ["version 1"]  # the last good version stands in
    assert fake_time.now - started == pytest.approx(TORN_WRITE_RETRY_SECONDS)
    assert fake_time.pauses == round(TORN_WRITE_RETRY_SECONDS / TORN_WRITE_PAUSE_SECONDS)
    assert "session w1 is unreadable: invalid JSON" in caplog.text
    assert "its last good version stands in" in caplog.text


def test_the_bound_is_per_pass_not_per_file(corpus: Corpus, db_path: Path, fake_time: FakeTime) -> None:
    for n in range(5):
        corpus.write(f"w{n}", session(f"good {n}", updated="2026-11-01T00:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        for n in range(5):
            corpus.write(f"w{n}", TORN)
        started = fake_time.now
        result = svc.call("ccweb_list_conversations", {}, None)
        assert [row["conversationId"] for row in result.payload["conversations"]] == [f"w{n}" for n in range(5)]
        assert fake_time.now - started == pytest.approx(TORN_WRITE_RETRY_SECONDS)
    finally:
        svc.close()


def test_a_file_that_never_parsed_is_not_waited_for(corpus: Corpus, db_path: Path, fake_time: FakeTime) -> None:
    """A hostile file has no good version to protect: once the index knows it never parsed, no
    retries, no delay. (The first look, which had not seen it, waited: it might have been a complete
    file caught in its next write.)"""
    corpus.write("bad", TORN)
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        fake_time.pauses = 0
        corpus.write("bad", TORN + b"x")
        result = svc.call("ccweb_list_user_inputs", {"conversationId": "bad"}, None)
        assert result.payload["error"]["code"] == "conversation_unreadable"
        assert fake_time.pauses == 0
    finally:
        svc.close()


def test_the_log_says_which_version_answered(svc: Service, corpus: Corpus, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "ccweb_index")
    corpus.write("w1", TORN)
    assert inputs(svc, "w1") == ["version 1"]
    assert "session w1 is unreadable: invalid JSON: the file does not end with the '}' that closes its object" in caplog.text


def test_a_huge_file_caught_mid_write_is_known_from_its_ends(
    corpus: Corpus, db_path: Path, fake_time: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file past load.ALONE_MIN_BYTES is parsed in a worker process. Caught in the middle of a
    write, it was handed to one at every look of the torn-write retry: 0.6-0.8 s per call of a
    50 MB conversation being written (found by an independent test). Its two ends say it is cut
    short; no worker starts."""
    big = "log line\n" * (load.ALONE_MIN_BYTES // 9 + 1)
    corpus.write("giant", session(big, "version 1"))
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        assert inputs(svc, "giant")[-1] == "version 1"
        started: list[object] = []
        real = load._load_in_workers
        monkeypatch.setattr(load, "_load_in_workers", lambda *args: started.append(args) or real(*args))
        whole = json.dumps(session(big, "version 1", "version 2")).encode()
        corpus.write("giant", whole[: len(whole) // 2])  # truncated, and half of version 2 written
        assert inputs(svc, "giant")[-1] == "version 1"  # the last good version stands in
        assert started == [] and fake_time.pauses > 0  # the retry looked again, at the ends alone
        corpus.write("giant", whole)
        assert inputs(svc, "giant")[-1] == "version 2"
    finally:
        svc.close()


def test_ends_read_while_the_file_changes_decide_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two ends of a file rewritten between their reads may be two versions' ends: a whole
    version's head and a torn one's tail would call it cut short under the whole one's signature
    (found by a review). Then nothing is decided from them, and the whole load reads the file."""
    path = tmp_path / "x.json"
    path.write_bytes(b'{"a": "' + b"x" * 10_000 + b'"}')
    pread = os.pread

    def rewritten_after_the_head(fd: int, size: int, offset: int) -> bytes:
        data = pread(fd, size, offset)
        if offset == 0:
            path.write_bytes(b'{"a": "' + b"y" * 20_000)  # in place, half of the next version
        return data

    monkeypatch.setattr(os, "pread", rewritten_after_the_head)
    assert files.read_session_ends(str(path), 10**9, 4096) is None


def _rows(svc: Service) -> dict[str, str | None]:
    result = svc.call("ccweb_list_conversations", {}, None)
    assert not result.is_error, result.payload
    return {row["conversationId"]: row["title"] for row in result.payload["conversations"]}


def test_a_file_created_whole_then_caught_mid_write_is_waited_for(
    svc: Service, corpus: Corpus, fake_time: FakeTime
) -> None:
    """Created complete, then rewritten in place before any look read it: the index had no version of
    it, and so no wait, and the conversation, whose creation had completed, was left out (found by an
    independent test, without a watcher)."""
    corpus.write("new", session("hello", title="created"))
    version_2 = json.dumps(session("hello", title="rewritten")).encode()
    corpus.write("new", version_2[: len(version_2) // 2])  # truncated, then half written

    def writer_finishes(pauses: int) -> None:
        if pauses == 2:
            corpus.write("new", version_2)

    fake_time.on_sleep = writer_finishes
    assert _rows(svc) == {"new": "rewritten", "w1": "t"}
    assert fake_time.pauses == 2


def test_a_file_deleted_then_caught_being_created_again_is_waited_for(
    corpus: Corpus, db_path: Path, fake_time: FakeTime
) -> None:
    """With a watcher: the row was read after the last write the watcher saw complete, so a torn read
    was taken for a write in flight after the latest complete version, and not waited for. But the
    file had been deleted since, a change as complete as a write: the answer showed the version from
    before the delete (found by an independent test)."""
    corpus.write("w1", session("version 1", title="before the delete"))
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    try:
        assert _rows(svc) == {"w1": "before the delete"}
        version_2 = json.dumps(session("version 2", title="created again")).encode()
        corpus.file("w1").unlink()
        writer = open(corpus.file("w1"), "wb")  # created again, half written, still open
        writer.write(version_2[: len(version_2) // 2])
        writer.flush()

        def writer_finishes(pauses: int) -> None:
            if pauses == 2:
                writer.write(version_2[len(version_2) // 2 :])
                writer.close()

        fake_time.on_sleep = writer_finishes
        assert _rows(svc) == {"w1": "created again"}
    finally:
        writer.close()
        svc.close()
