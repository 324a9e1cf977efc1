"""Logs stay small (issue 10, item 8): a session that keeps changing while unreadable (here: growing
past the size limit, the issue's case, 2,817 lines in 10 s) is logged once per
UNREADABLE_LOG_SECONDS, with the count of the states that were not logged. The clock is injected.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ccweb_index.indexer.load import UNREADABLE_LOG_SECONDS
from ccweb_index.server.service import Service

from conftest import Corpus, session

LIMIT = 2_000


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture, session_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"session {session_id} is unreadable")]


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_a_file_growing_past_the_limit_is_logged_once_a_minute(
    corpus: Corpus, db_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, watch: bool
) -> None:
    corpus.write("big", session("fits"))
    svc = Service(corpus.path, db_path, watch=watch, max_session_bytes=LIMIT)
    svc.start()
    clock = Clock()
    monkeypatch.setattr(svc.indexer.unreadable, "_clock", clock)
    try:
        for n in range(100):
            corpus.write("big", session("x" * (LIMIT + n)))
            result = svc.call("ccweb_list_user_inputs", {"conversationId": "big"}, None)
            assert [i["content"] for i in result.payload["inputs"]] == ["fits"]
            clock.now += 0.1  # 100 changes in 10 s
        assert len(lines(caplog, "big")) == 1, lines(caplog, "big")
        clock.now += UNREADABLE_LOG_SECONDS
        corpus.write("big", session("x" * (LIMIT + 500)))
        svc.call("ccweb_list_user_inputs", {"conversationId": "big"}, None)
        logged = lines(caplog, "big")
        assert len(logged) == 2, logged
        # 99 writes were not logged (a watcher may also have seen a write half-way: one state more)
        count = re.search(r"\((\d+) more unreadable states of it were not logged\)", logged[1])
        assert count is not None and int(count.group(1)) >= 99, logged[1]
        assert "over the 2000-byte limit" in logged[1] and "its last good version stands in" in logged[1]
    finally:
        svc.close()


def test_a_file_flapping_between_readable_and_torn_is_logged_once_a_minute(
    corpus: Corpus, db_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus.write("w", session("v0"))
    svc = Service(corpus.path, db_path, max_session_bytes=LIMIT)
    svc.start()
    clock = Clock()
    monkeypatch.setattr(svc.indexer.unreadable, "_clock", clock)
    try:
        for n in range(20):
            corpus.write("w", session(f"v{n}"))
            svc.call("ccweb_list_user_inputs", {"conversationId": "w"}, None)
            corpus.write("w", b"x" * (LIMIT + 1 + n))
            svc.call("ccweb_list_user_inputs", {"conversationId": "w"}, None)
        assert len(lines(caplog, "w")) == 1
    finally:
        svc.close()
