"""ccweb_wait_for_conversations and the changeToken (issue 13 item 4), through the SDK's client.

Every wait here is woken by files this test writes, the way cc-web would. What a wait answers runs
in the server `serve` runs, in this process (conftest.memory_client_for, with its own watcher or
none); what is a process's runs in a real `ccweb-index serve` over stdio or HTTP: progress
notifications, SIGTERM, many waits on the shared HTTP server. The index is shared with other
processes where it matters (a `watch` daemon that indexes a change before the server does). The
contract's list part is tests/reference.py's; what a token means is checked by what the next wait
reports.
"""

from __future__ import annotations

import functools
import os
import signal
import string
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from test_http import TOKEN, _clean_env, _headers, outliving_the_server, start_http_server, stop

from ccweb_index.indexer.tuning import WAIT_PROGRESS_ENV
from ccweb_index.server.tools import ChangePosition, decode_change_token, encode_change_token, wait_request

import reference
from conftest import (
    CCWEB_INDEX,
    Corpus,
    StdioClient,
    answer_of,
    memory_client_for,
    server_pid,
    session,
    stdio_client_for,
    wait_until,
)

LIST = "ccweb_list_conversations"
WAIT = "ccweb_wait_for_conversations"
SOURCE = "orch"
# A wait that should end at once is given this long: long enough never to end by itself in a test.
LONG = 60


def child(*inputs: str, status: str | None = None, updated: str = "2026-11-22T00:00:00Z") -> dict[str, Any]:
    extra = {} if status is None else {"status": status}
    return session(*inputs, updated=updated, created_from={"kind": "mcp", "sourceSessionId": SOURCE}, **extra)


def write_family(corpus: Corpus) -> None:
    corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
    corpus.write("w1", child("task one", status="running"))
    corpus.write("w2", child("task two", status="running", updated="2026-11-23T00:00:00Z"))
    corpus.write("other", session("unrelated", updated="2026-11-21T00:00:00Z"))


def payload_of(result: types.CallToolResult) -> dict[str, Any]:
    problem, payload = answer_of(result)
    assert problem is None, problem
    return payload


def start_wait(client: StdioClient, arguments: dict[str, Any], **kwargs: Any) -> Future[types.CallToolResult]:
    return client._portal.start_task_soon(functools.partial(client.session.call_tool, WAIT, arguments, **kwargs))


def token_of(client: StdioClient, arguments: dict[str, Any] | None = None) -> str:
    payload, is_error = client.call(LIST, {"scope": "children", **(arguments or {})})
    assert not is_error, payload
    return str(payload["changeToken"])


@contextmanager
def served(corpus: Corpus, db: Path, *, watch: bool = True, max_waits: int | None = None) -> Iterator[StdioClient]:
    with memory_client_for(corpus.path, db, source=SOURCE, watch=watch, max_waits=max_waits) as client:
        client.list_tools()  # as hosts do; the SDK then checks answers against the output schemas
        yield client


@contextmanager
def served_over_stdio(corpus: Corpus, db: Path, env: dict[str, str] | None = None) -> Iterator[StdioClient]:
    with stdio_client_for(corpus.path, db, source=SOURCE, env=env) as client:
        client.list_tools()
        yield client


def as_listed(corpus: Corpus, payload: dict[str, Any], arguments: dict[str, Any]) -> None:
    """The wait's list part is exactly ccweb_list_conversations's answer for the files now."""
    listed = {k: v for k, v in payload.items() if k not in ("changed", "timedOut", "tokenReset")}
    expected, is_error = reference.list_conversations(corpus.path, arguments, SOURCE)
    assert not is_error and listed == expected


# --- what wakes a wait --------------------------------------------------------------------------------


CHANGES = {
    "create": lambda corpus: corpus.write("w3", child("task three")),
    "rewrite": lambda corpus: corpus.write("w1", child("task one", "and more", status="running")),
    "status": lambda corpus: corpus.write("w1", child("task one", status="idle")),
    "delete": lambda corpus: corpus.delete("w1"),
}
CHANGED_ID = {"create": "w3", "rewrite": "w1", "status": "w1", "delete": "w1"}


@pytest.mark.parametrize("indexer", ["own watcher", "another process indexes it"])
@pytest.mark.parametrize("kind", list(CHANGES))
def test_a_wait_is_woken_by_each_kind_of_change(corpus: Corpus, db_path: Path, tmp_path: Path, kind: str, indexer: str) -> None:
    """A change to a selected conversation answers the wait at once. With "another process indexes
    it", the server runs no watcher and a `watch` daemon on the same index commits the change: the
    server learns of it from the index's change sequence."""
    write_family(corpus)
    daemon = None
    if indexer != "own watcher":
        daemon = subprocess.Popen(
            [CCWEB_INDEX, "watch", "-v", "--sessions-dir", str(corpus.path), "--db", str(db_path)],
            env=_clean_env(), stderr=open(tmp_path / "daemon.log", "wb"),
        )  # fmt: skip
        # Indexing and watching (and its SIGTERM handler set) before the server opens the index.
        assert wait_until(lambda: "watching" in (tmp_path / "daemon.log").read_text(), timeout=60), "the daemon did not start"
    try:
        with served(corpus, db_path, watch=daemon is None) as client:
            token = token_of(client)
            waiting = start_wait(client, {"scope": "children", "since": token, "timeoutSeconds": LONG})
            time.sleep(0.5)
            assert not waiting.done(), "the wait ended with nothing changed"
            CHANGES[kind](corpus)
            started = time.monotonic()
            payload = payload_of(waiting.result(timeout=30))
            took = time.monotonic() - started
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=30) == 0
    assert payload["timedOut"] is False and payload["tokenReset"] is False
    assert payload["changed"] == [{"conversationId": CHANGED_ID[kind], "deleted": kind == "delete"}]
    assert payload["changeToken"] != token
    as_listed(corpus, payload, {"scope": "children"})
    assert took < 10, f"woken {took:.1f} s after the change"


def test_no_lost_wake_up_between_a_list_and_a_wait(corpus: Corpus, db_path: Path) -> None:
    """A change that lands after the list answered and before the wait is called is reported at
    once, and the new token does not report it again."""
    write_family(corpus)
    with served(corpus, db_path) as client:
        token = token_of(client)
        corpus.write("w2", child("task two", status="idle", updated="2026-11-23T00:00:00Z"))
        time.sleep(0.3)  # the watcher has indexed it: nobody is waiting yet
        started = time.monotonic()
        first, _ = client.call(WAIT, {"scope": "children", "since": token, "timeoutSeconds": LONG})
        assert time.monotonic() - started < 5
        assert first["changed"] == [{"conversationId": "w2", "deleted": False}] and first["timedOut"] is False
        second, _ = client.call(WAIT, {"scope": "children", "since": first["changeToken"], "timeoutSeconds": 1})
        assert second["changed"] == [] and second["timedOut"] is True
        assert second["changeToken"] == first["changeToken"], "nothing changed: the same position"


def test_changes_outside_the_selection_do_not_wake_it(corpus: Corpus, db_path: Path) -> None:
    """Another source's conversation, or one that never matches the filter, is not watched; one that
    leaves the filter is (it matched before the change)."""
    write_family(corpus)
    with served(corpus, db_path) as client:
        token = token_of(client, {"status": "running"})
        arguments = {"scope": "children", "status": "running", "since": token, "timeoutSeconds": LONG}
        waiting = start_wait(client, arguments)
        corpus.write("other", session("unrelated, rewritten", updated="2026-11-21T00:00:00Z"))
        corpus.write(SOURCE, session("plan", "and go", updated="2026-11-20T00:00:00Z"))
        corpus.write("w9", child("idle from the start", status="idle"))
        time.sleep(1.5)
        assert not waiting.done(), payload_of(waiting.result())
        corpus.write("w1", child("task one", status="idle"))  # leaves status "running"
        payload = payload_of(waiting.result(timeout=30))
    assert payload["changed"] == [{"conversationId": "w1", "deleted": False}]
    assert [row["conversationId"] for row in payload["conversations"]] == ["w2"]


def test_a_wait_on_conversation_ids_watches_only_those(corpus: Corpus, db_path: Path) -> None:
    """conversationIds: a change to another conversation, even a selected scope's, does not wake the
    wait; a listed id whose file appears does (it was absent when the wait began)."""
    write_family(corpus)
    selection = {"scope": "children", "conversationIds": ["w1", "w3"]}
    with served(corpus, db_path) as client:
        token = token_of(client, selection)
        waiting = start_wait(client, {**selection, "since": token, "timeoutSeconds": LONG})
        corpus.write("w2", child("task two", status="idle", updated="2026-11-23T00:00:00Z"))
        corpus.write("other", session("unrelated, rewritten", updated="2026-11-21T00:00:00Z"))
        time.sleep(1.5)
        assert not waiting.done(), payload_of(waiting.result())
        corpus.write("w3", child("task three"))
        payload = payload_of(waiting.result(timeout=30))
    assert payload["changed"] == [{"conversationId": "w3", "deleted": False}]
    as_listed(corpus, payload, selection)


def write_tree(corpus: Corpus) -> None:
    """The family, a worker's worker (g1, below w1) and another tree that is not the source's."""
    write_family(corpus)
    below = {"kind": "mcp", "sourceSessionId": "w1"}
    corpus.write("g1", session("a worker's worker", updated="2026-11-24T00:00:00Z", created_from=below))
    corpus.write("stranger", session("elsewhere", updated="2026-11-21T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": "other"}))


def test_a_wait_on_descendants_is_woken_by_a_grandchild(corpus: Corpus, db_path: Path) -> None:
    """scope "descendants": a grandchild's change wakes the wait, and so does a conversation that joins
    the tree below it; a change in another tree does not."""
    write_tree(corpus)
    tree = {"scope": "descendants"}
    with served(corpus, db_path) as client:
        token = token_of(client, tree)
        waiting = start_wait(client, {**tree, "since": token, "timeoutSeconds": LONG})
        corpus.write("stranger", session("elsewhere, again", updated="2026-11-21T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": "other"}))
        corpus.write("other", session("unrelated, rewritten", updated="2026-11-21T00:00:00Z"))
        time.sleep(1.5)
        assert not waiting.done(), payload_of(waiting.result())
        corpus.write("g1", session("a worker's worker", "done", updated="2026-11-24T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": "w1"}))
        first = payload_of(waiting.result(timeout=30))
        assert first["changed"] == [{"conversationId": "g1", "deleted": False}]
        as_listed(corpus, first, tree)
        waiting = start_wait(client, {**tree, "since": first["changeToken"], "timeoutSeconds": LONG})
        corpus.write("gg1", session("three below", updated="2026-11-25T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": "g1"}))
        second = payload_of(waiting.result(timeout=30))
    assert second["changed"] == [{"conversationId": "gg1", "deleted": False}]
    assert {row["conversationId"]: row["depth"] for row in second["conversations"]} == {"gg1": 3, "g1": 2, "w2": 1, "w1": 1}


def test_a_descendants_wait_stops_where_the_list_stops(corpus: Corpus, db_path: Path) -> None:
    """The list shows DESCENDANTS_MAX_DEPTH levels; a change one level further down is no change of
    the selection (it woke the wait, with a row the answer did not list: found by an independent test)."""
    from ccweb_index.indexer.tree import DESCENDANTS_MAX_DEPTH

    parent = SOURCE
    corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
    for depth in range(1, DESCENDANTS_MAX_DEPTH + 2):
        corpus.write(f"d{depth}", session("work", updated="2026-11-21T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": parent}))
        parent = f"d{depth}"
    tree = {"scope": "descendants", "timeoutSeconds": 1}
    with served(corpus, db_path, watch=False) as client:
        token = token_of(client, {"scope": "descendants"})
        beyond = f"d{DESCENDANTS_MAX_DEPTH + 1}"
        corpus.write(beyond, session("work", "more", updated="2026-11-22T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": f"d{DESCENDANTS_MAX_DEPTH}"}))
        payload, is_error = client.call(WAIT, {**tree, "since": token})
        assert not is_error and payload["timedOut"] is True and payload["changed"] == [], payload["changed"]
        last = f"d{DESCENDANTS_MAX_DEPTH}"
        corpus.write(last, session("work", "more", updated="2026-11-22T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": f"d{DESCENDANTS_MAX_DEPTH - 1}"}))
        payload, is_error = client.call(WAIT, {**tree, "since": payload["changeToken"]})
    assert not is_error and payload["changed"] == [{"conversationId": last, "deleted": False}], payload["changed"]


def test_a_wait_without_since_reports_a_change_made_as_it_began(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """"Without since, it waits for a change after the call": a change made after the call began,
    which the call's own freshness proof brings into the index, is such a change. "Now" was read
    after the proof, and the change was lost (found by an independent test)."""
    from ccweb_index.server import from_index
    from ccweb_index.server.from_index import WaitCheck
    from ccweb_index.server.service import Service
    from ccweb_index.server.tools import wait_request

    write_family(corpus)
    prove = from_index.IndexAnswers._make_fresh

    def written_then_proved(self: Any) -> bool:
        corpus.write("w1", child("task one", status="done"))  # after the call began, before its proof
        return prove(self)

    svc = Service(corpus.path, db_path, watch=False)
    svc.start()
    try:
        monkeypatch.setattr(from_index.IndexAnswers, "_make_fresh", written_then_proved)
        request = wait_request({"scope": "children", "timeoutSeconds": 0}, SOURCE)
        state = svc.wait_check(WaitCheck(request, None, fresh=True, final=True))
    finally:
        svc.close()
    assert state.answer is not None and state.answer["changed"] == [{"conversationId": "w1", "deleted": False}]


def test_a_deleted_subtree_is_reported_whole(corpus: Corpus, db_path: Path) -> None:
    """A child and its own worker deleted together: both have left the tree, but their tombstones
    still say where they were, so the next wait reports both (without a watcher: the wait's check
    finds them)."""
    write_tree(corpus)
    with served(corpus, db_path, watch=False) as client:
        token = token_of(client, {"scope": "descendants"})
        corpus.delete("g1")
        corpus.delete("w1")
        corpus.delete("stranger")
        payload, is_error = client.call(WAIT, {"scope": "descendants", "since": token, "timeoutSeconds": LONG})
    assert not is_error, payload
    assert sorted(payload["changed"], key=lambda c: c["conversationId"]) == [
        {"conversationId": "g1", "deleted": True}, {"conversationId": "w1", "deleted": True},
    ]  # fmt: skip
    assert [row["conversationId"] for row in payload["conversations"]] == ["w2"]


def _under(parent: str, *inputs: str, status: str = "running", updated: str = "2026-11-22T00:00:00Z") -> dict[str, Any]:
    return session(*inputs or ("work",), updated=updated, status=status,
                   created_from={"kind": "mcp", "sourceSessionId": parent})  # fmt: skip


@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_a_change_in_the_tree_stays_reported_when_an_ancestor_leaves_it(corpus: Corpus, db_path: Path, how: str) -> None:
    """SOURCE -> a -> b -> x: x finishes, then `a` leaves the tree, taking b and x with it. x's change
    was made in the tree, so a wait from before both reports it, whatever its filters; it was judged
    by the tree as it is now, and lost: a wait for finished workers timed out (found by an
    independent test). b and x, taken out with `a`, are reported as leaving."""
    corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
    corpus.write("elsewhere", session("another plan", updated="2026-11-20T00:00:00Z"))
    corpus.write("a", _under(SOURCE))
    corpus.write("b", _under("a"))
    corpus.write("x", _under("b"))
    selections = [{"scope": "descendants"}, {"scope": "descendants", "status": "done"},
                  {"scope": "descendants", "conversationIds": ["x"]}]  # fmt: skip
    with served(corpus, db_path, watch=False) as client:
        tokens = [token_of(client, selection) for selection in selections]
        corpus.write("x", _under("b", "work", "done", status="done", updated="2026-11-23T00:00:00Z"))
        client.call(LIST, {"limit": 1})  # x's change indexed first, as a watcher would
        if how == "moved":
            corpus.write("a", _under("elsewhere", updated="2026-11-24T00:00:00Z"))
        else:
            corpus.delete("a")
        answers = [client.call(WAIT, {**selection, "since": token, "timeoutSeconds": 0})[0]
                   for selection, token in zip(selections, tokens, strict=True)]  # fmt: skip
    assert [sorted(item["conversationId"] for item in answer["changed"]) for answer in answers] == [
        ["a", "b", "x"], ["x"], ["x"]
    ]
    assert all(not item["deleted"] for answer in answers for item in answer["changed"] if item["conversationId"] != "a")


def test_a_subtree_joining_the_tree_is_reported_under_the_filters(corpus: Corpus, db_path: Path) -> None:
    """A running conversation with a finished worker joins the tree: the worker now matches a wait
    for finished workers in the tree, and wakes it, though only its parent's file changed."""
    corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
    corpus.write("p", session("a plan of its own", updated="2026-11-21T00:00:00Z", status="running"))
    corpus.write("x", _under("p", status="done"))
    done = {"scope": "descendants", "status": "done"}
    with served(corpus, db_path, watch=False) as client:
        token = token_of(client, done)
        corpus.write("p", _under(SOURCE, "a plan of its own", updated="2026-11-24T00:00:00Z"))
        payload, is_error = client.call(WAIT, {**done, "since": token, "timeoutSeconds": 0})
    assert not is_error and payload["changed"] == [{"conversationId": "x", "deleted": False}], payload
    assert [row["conversationId"] for row in payload["conversations"]] == ["x"]


def test_deleted_means_the_file_is_gone_not_gone_from_the_selection(corpus: Corpus, db_path: Path) -> None:
    """A child deleted, then created again as another conversation's child: it left the children, but
    its file is there (`deleted` said true)."""
    write_family(corpus)
    with served(corpus, db_path, watch=False) as client:
        token = token_of(client)
        corpus.delete("w1")
        client.call(LIST, {"limit": 1})
        corpus.write("w1", session("task one", updated="2026-11-24T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": "other"}))
        payload, is_error = client.call(WAIT, {"scope": "children", "since": token, "timeoutSeconds": 0})
    assert not is_error and payload["changed"] == [{"conversationId": "w1", "deleted": False}], payload


def test_the_hub_reads_the_log_and_the_rows_as_one_state(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change committed between the hub's read of the log and its reads of the rows: a worker
    deleted while in the tree was judged by its manager's place after the manager had left, and the
    wait, told nothing concerned it, was not woken (found by a review). One read transaction now."""
    from ccweb_index.server import changes as hub_module
    from ccweb_index.server import queries
    from ccweb_index.server.service import Service

    corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
    corpus.write("other", session("another plan", updated="2026-11-20T00:00:00Z"))
    corpus.write("m", _under(SOURCE))
    corpus.write("w", _under("m"))
    svc = Service(corpus.path, db_path, watch=False)
    svc.start()
    hub = hub_module.ChangeHub(svc.db_path)
    try:
        listed = svc.call(LIST, {"scope": "descendants"}, SOURCE).payload
        since = decode_change_token(listed["changeToken"])
        corpus.delete("w")
        svc.call(LIST, {"limit": 1}, SOURCE)  # the deletion is indexed: the one change after `since`
        read_log = queries.changes_after

        def then_the_manager_leaves(*args: Any) -> Any:
            found = read_log(*args)
            corpus.write("m", _under("other", updated="2026-11-25T00:00:00Z"))
            svc.call(LIST, {"limit": 1}, SOURCE)  # committed before the hub reads the rows
            return found

        monkeypatch.setattr(queries, "changes_after", then_the_manager_leaves)
        woken = threading.Event()
        assert since is not None
        hub.add(hub_module.Waiter(wait_request({"scope": "descendants", "conversationIds": ["w"]}, SOURCE).selection,
                                  since, woken.set))  # fmt: skip
        assert woken.wait(10), "the wait was not woken by the deletion of a worker in the tree"
    finally:
        hub.close()
        svc.close()


def test_a_time_out_answers_timed_out_with_the_list(corpus: Corpus, db_path: Path) -> None:
    write_family(corpus)
    with served(corpus, db_path) as client:
        token = token_of(client)
        started = time.monotonic()
        payload, is_error = client.call(WAIT, {"scope": "children", "since": token, "timeoutSeconds": 1.5})
        took = time.monotonic() - started
        zero, _ = client.call(WAIT, {"timeoutSeconds": 0})
    assert not is_error and payload["timedOut"] is True and payload["changed"] == []
    assert payload["changeToken"] == token
    assert 1.5 <= took < 10
    as_listed(corpus, payload, {"scope": "children"})
    assert zero["timedOut"] is True and zero["scope"] == "all"


def test_tokens_from_another_index_or_garbage(corpus: Corpus, db_path: Path, tmp_path: Path) -> None:
    """A token of another index (or of this one before a rebuild) reports everything listed as
    changed (tokenReset); a token that is not one is `invalid_change_token`."""
    write_family(corpus)
    with served(corpus, tmp_path / "other.sqlite") as other:
        foreign = token_of(other)
    with served(corpus, db_path) as client:
        started = time.monotonic()
        reset, _ = client.call(WAIT, {"scope": "children", "since": foreign, "timeoutSeconds": LONG})
        assert time.monotonic() - started < 5
        assert reset["tokenReset"] is True and reset["timedOut"] is False
        assert reset["changed"] == [{"conversationId": r["conversationId"], "deleted": False} for r in reset["conversations"]]
        assert len(reset["changed"]) == 2
        tampered = foreign[:-2] + ("AA" if not foreign.endswith("AA") else "BB")
        # The checksum is no secret: a forged token of this index past SQLite's integers is refused too.
        own = decode_change_token(token_of(client))
        assert own is not None
        beyond = encode_change_token(ChangePosition(own.index_id, 2**64 - 1))
        # Padding added, or the last character's unused low bits changed: the same bytes, spelled
        # otherwise, which no answer gave (a clean-room test saw them accepted).
        token = token_of(client)
        alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
        respelled = [token + "==", token[:-1] + alphabet[alphabet.index(token[-1]) | 1]]
        for since in ("", "garbage", tampered, 42, ["x"], beyond, *respelled):
            payload, is_error = client.call(WAIT, {"since": since, "timeoutSeconds": LONG})
            assert is_error and payload["error"]["code"] == "invalid_change_token", since


def test_changes_committed_by_another_process_before_the_server_started(corpus: Corpus, db_path: Path) -> None:
    """The token is a position in the index, not in a process: a token from one server, a change
    indexed by another process while no server runs, and a new server reports it."""
    write_family(corpus)
    with served(corpus, db_path) as client:
        token = token_of(client)
    corpus.delete("w2")
    subprocess.run([CCWEB_INDEX, "build", "--sessions-dir", str(corpus.path), "--db", str(db_path)], check=True, env=_clean_env())
    with served(corpus, db_path) as client:
        payload, _ = client.call(WAIT, {"scope": "children", "since": token, "timeoutSeconds": LONG})
    assert payload["changed"] == [{"conversationId": "w2", "deleted": True}]


# --- progress, cancellation, the cap, SIGTERM -----------------------------------------------------------


def test_progress_notifications_every_interval(corpus: Corpus, db_path: Path) -> None:
    """A notification every PROGRESS_SECONDS (server.waits; 10 s by default, 1 s here through the
    environment), none at the time-out itself."""
    write_family(corpus)
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    with served_over_stdio(corpus, db_path, env={WAIT_PROGRESS_ENV: "1000"}) as client:
        result = start_wait(client, {"timeoutSeconds": 2.5}, progress_callback=progress).result(timeout=60)
    assert payload_of(result)["timedOut"] is True
    assert [int(value) for value, _, _ in seen] == [1, 2], seen
    for value, total, message in seen:
        assert value < 2.5 and total == 2.5 and message and "nothing changed" in message


def test_a_cancelled_wait_ends_and_frees_its_place(corpus: Corpus, db_path: Path) -> None:
    """The client cancels (it sends notifications/cancelled): the server ends the wait at once, so
    with room for one wait, the next wait is accepted."""
    write_family(corpus)
    with served(corpus, db_path, max_waits=1) as client:
        portal = client._portal

        async def cancelled_after(seconds: float) -> bool:
            with anyio.move_on_after(seconds) as scope:
                await client.session.call_tool(WAIT, {"timeoutSeconds": LONG})
            return scope.cancelled_caught

        assert portal.call(cancelled_after, 1.0)
        accepted = wait_until(lambda: not client.call(WAIT, {"timeoutSeconds": 0})[1], timeout=5)
        assert accepted, "the cancelled wait still holds its place"


def test_the_cap_refuses_waits_beyond_it(corpus: Corpus, db_path: Path) -> None:
    write_family(corpus)
    with served(corpus, db_path, max_waits=2) as client:
        open_waits = [start_wait(client, {"timeoutSeconds": 3}) for _ in range(2)]
        time.sleep(0.5)
        payload, is_error = client.call(WAIT, {"timeoutSeconds": LONG})
        assert is_error and payload["error"]["code"] == "too_many_waits"
        assert "--max-waits" in payload["error"]["message"]
        assert all(payload_of(w.result(timeout=30))["timedOut"] for w in open_waits)
        payload, is_error = client.call(WAIT, {"timeoutSeconds": 0})
        assert not is_error


def test_sigterm_answers_waits_in_flight_over_stdio(corpus: Corpus, db_path: Path) -> None:
    write_family(corpus)
    with served_over_stdio(corpus, db_path) as client:
        waits = [start_wait(client, {"scope": "children", "timeoutSeconds": LONG}) for _ in range(3)]
        time.sleep(1.0)
        pid = server_pid(db_path)
        started = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        answers = [payload_of(w.result(timeout=20)) for w in waits]
        assert time.monotonic() - started < 10
        assert wait_until(lambda: not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split()[2], 10)
    assert all(a["timedOut"] is True and a["changed"] == [] for a in answers)
    as_listed(corpus, answers[0], {"scope": "children"})


def test_sigterm_answers_waits_in_flight_over_http(corpus: Corpus, db_path: Path, tmp_path: Path) -> None:
    write_family(corpus)
    server = start_http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN)
    try:
        with start_blocking_portal() as portal:
            with portal.wrap_async_context_manager(outliving_the_server(server.url, _headers(TOKEN, SOURCE))) as client:
                portal.call(client.list_tools)
                waits = [portal.start_task_soon(client.call_tool, WAIT, {"scope": "children", "timeoutSeconds": LONG}) for _ in range(3)]
                time.sleep(1.0)
                started = time.monotonic()
                server.proc.send_signal(signal.SIGTERM)
                answers = [payload_of(w.result(timeout=20)) for w in waits]
                assert time.monotonic() - started < 10
        assert server.proc.wait(timeout=30) == 0
    finally:
        stop(server)
    assert all(a["timedOut"] is True and a["changed"] == [] for a in answers)
    assert "Traceback" not in server.stderr()


# --- many waits on the shared server ------------------------------------------------------------------

MANY = 200
IDLE_SECONDS = 5.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def _many_waits(url: str, corpus: Corpus, pid: int) -> tuple[float, list[dict[str, Any]]]:
    limits = httpx2.Limits(max_connections=MANY + 10, max_keepalive_connections=MANY + 10)
    async with (
        httpx2.AsyncClient(headers=_headers(TOKEN, SOURCE), timeout=httpx2.Timeout(30, read=120), limits=limits) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        token = (await client.call_tool(LIST, {"scope": "children"})).structured_content["changeToken"]
        answers: list[dict[str, Any]] = []

        async def one() -> None:
            result = await client.call_tool(WAIT, {"scope": "children", "since": token, "timeoutSeconds": 120})
            answers.append(payload_of(result))

        async with anyio.create_task_group() as tasks:
            for _ in range(MANY):
                tasks.start_soon(one)
            await anyio.sleep(3.0)  # every wait has made its first look and sleeps
            assert not answers, answers[:1]
            before = _cpu_seconds(pid)
            await anyio.sleep(IDLE_SECONDS)
            idle_cpu = _cpu_seconds(pid) - before
            corpus.write("w1", child("task one", status="idle"))
        return idle_cpu, answers


def test_200_waits_on_the_http_server(corpus: Corpus, db_path: Path, tmp_path: Path) -> None:
    """200 waits open at once on the shared server (more than the worker threads it has: a wait
    holds none), near-zero CPU while they wait, and all answered by one change."""
    write_family(corpus)
    server = start_http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN)
    try:
        idle_cpu, answers = anyio.run(_many_waits, server.url, corpus, server.proc.pid)
    finally:
        assert stop(server) == 0
    print(f"{MANY} open waits: {idle_cpu:.3f} s of server CPU over {IDLE_SECONDS:.0f} s idle")
    assert len(answers) == MANY
    assert all(a["changed"] == [{"conversationId": "w1", "deleted": False}] for a in answers)
    # Near zero: a busy loop would use the whole interval. The figure is in docs/benchmarks.md.
    assert idle_cpu < IDLE_SECONDS / 4
