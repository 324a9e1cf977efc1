"""Issue #13 items 1-3 through the SDK's client: pages, the tree, lookups by id. Paging under writes
and the read-only check run against `ccweb-index serve` over stdio; the rest is about answers and
talks to the same server in memory (conftest.memory_client_for).

- Paging to the end while another writer rewrites files: every conversation that did not change
  appears exactly once, and the pages stay in answer order.
- A cursor answers only its own query; altered or garbage cursors are refused with a message that
  says what to do; a cursor still continues after the index was deleted and rebuilt.
- scope "descendants" on a deep chain (beyond the bound), a wide tree, cycles and self-references,
  with and without a watcher, as tests/reference.py says.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.indexer.tree import DESCENDANTS_MAX_DEPTH
from ccweb_index.server import cursor
from ccweb_index.server.service import Service
from ccweb_index.server.tools import MAX_CONVERSATION_IDS, conversations_request, inputs_request

import reference
from conftest import Corpus, StdioClient, memory_client_for, session, stdio_client_for
from test_contract import same_answer

INPUTS, CONVERSATIONS = "ccweb_list_user_inputs", "ccweb_list_conversations"
SOURCE = "orch"
BASE_MS = 1_790_000_000_000


def mcp_child_of(parent: str) -> dict[str, str]:
    return {"kind": "mcp", "sourceSessionId": parent}


def write_child(corpus: Corpus, session_id: str, parent: str, updated: int, **extra: Any) -> None:
    corpus.write(session_id, session(f"work of {session_id}", updated=BASE_MS + updated, created_from=mcp_child_of(parent), **extra))


def page_through(call: Any, tool: str, arguments: dict[str, Any], limits: list[int]) -> list[dict[str, Any]]:
    """Every page of a query, following nextCursor, the limit changing from page to page."""
    pages: list[dict[str, Any]] = []
    current = dict(arguments)
    while True:
        current["limit"] = limits[len(pages) % len(limits)]
        payload, is_error = call(tool, current)
        assert not is_error, payload
        assert payload["hasMore"] == (payload["nextCursor"] is not None)
        pages.append(payload)
        if payload["nextCursor"] is None:
            return pages
        assert len(pages) < 1000, "the pages never ended"
        current["cursor"] = payload["nextCursor"]


def rows_of(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for page in pages for row in page["conversations"]]


@pytest.fixture
def client(corpus: Corpus, tmp_path: Path) -> Iterator[StdioClient]:
    with memory_client_for(corpus.path, tmp_path / "index.sqlite", source=SOURCE) as connected:
        yield connected


# --- paging under concurrent writes ------------------------------------------------------------


def test_paging_to_the_end_while_files_are_rewritten(corpus: Corpus, tmp_path: Path) -> None:
    corpus.write(SOURCE, session("orchestrate"))
    steady = [f"steady-{n:03d}" for n in range(150)]
    churning = [f"churn-{n:02d}" for n in range(30)]
    for n, session_id in enumerate(steady + churning):
        write_child(corpus, session_id, SOURCE, updated=n % 40)  # many ties on updatedAt: ids break them
    stop = threading.Event()
    rewrites = 0

    def writer() -> None:
        nonlocal rewrites
        while not stop.is_set():  # newer each time: a rewritten conversation moves to the front
            session_id = churning[rewrites % len(churning)]
            how = "atomic" if rewrites % 2 else "inplace"
            corpus.write(session_id, session("again", updated=BASE_MS + 1000 + rewrites, created_from=mcp_child_of(SOURCE)), how=how)
            rewrites += 1
            stop.wait(0.002)

    with stdio_client_for(corpus.path, tmp_path / "index.sqlite", source=SOURCE) as client:
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            pages = {scope: page_through(client.call, CONVERSATIONS, {"scope": scope}, [7, 3, 11]) for scope in ("all", "children", "descendants")}
        finally:
            stop.set()
            thread.join()
    assert rewrites > 20, "the writer barely ran while the pages were read"
    for scope, scope_pages in pages.items():
        rows = rows_of(scope_pages)
        ids = [row["conversationId"] for row in rows]
        assert sorted(i for i in ids if i.startswith("steady-")) == steady, scope
        assert len(ids) == len(set(ids)), f"{scope}: a conversation appeared twice"
        keys = [(-int(reference.parse_time(row["updatedAt"]) or 0), row["conversationId"]) for row in rows]
        assert keys == sorted(keys), f"{scope}: pages out of answer order"


# --- cursors bound to their query -------------------------------------------------------------


@pytest.fixture
def small_tree(corpus: Corpus) -> Corpus:
    corpus.write(SOURCE, session(*[f"requirement {n}: " + "x" * 40 for n in range(12)]))
    corpus.write("other", session("another conversation", "and more", "and more again"))
    for n in range(8):
        write_child(corpus, f"w{n}", SOURCE, updated=n, agent="codex" if n % 2 else "claude")
        write_child(corpus, f"w{n}-sub", f"w{n}", updated=20 + n)
    return corpus


def first_cursor(client: StdioClient, tool: str, arguments: dict[str, Any]) -> str:
    payload, is_error = client.call(tool, arguments)
    assert not is_error and isinstance(payload["nextCursor"], str), payload
    return str(payload["nextCursor"])


def assert_invalid_cursor(client: StdioClient, tool: str, arguments: dict[str, Any]) -> None:
    payload, is_error = client.call(tool, arguments)
    assert is_error, (arguments, payload)
    assert payload["error"]["code"] == "invalid_cursor"
    assert "without cursor" in payload["error"]["message"]


def test_a_cursor_continues_only_its_own_query(client: StdioClient, small_tree: Corpus) -> None:
    query = {"scope": "children", "agent": "codex", "limit": 1}
    cursor = first_cursor(client, CONVERSATIONS, query)
    for other in (
        {"scope": "all", "agent": "codex"},
        {"scope": "descendants", "agent": "codex"},
        {"scope": "children"},
        {"scope": "children", "agent": "claude"},
        {"scope": "children", "agent": "codex", "status": "idle"},
        {"scope": "children", "agent": "codex", "conversationIds": ["w1", "w3"]},
    ):
        assert_invalid_cursor(client, CONVERSATIONS, {**other, "cursor": cursor})
    assert_invalid_cursor(client, INPUTS, {"conversationId": SOURCE, "cursor": cursor})
    # The same query (filters compare case-insensitively), with another limit: the next page.
    payload, is_error = client.call(CONVERSATIONS, {"scope": "children", "agent": "CODEX", "limit": 2, "cursor": cursor})
    assert not is_error and [row["conversationId"] for row in payload["conversations"]] == ["w5", "w3"]

    inputs_cursor = first_cursor(client, INPUTS, {"conversationId": SOURCE, "limit": 2})
    assert_invalid_cursor(client, INPUTS, {"conversationId": "other", "cursor": inputs_cursor})
    assert_invalid_cursor(client, CONVERSATIONS, {"cursor": inputs_cursor})
    payload, is_error = client.call(INPUTS, {"cursor": inputs_cursor, "maxChars": 60})  # the own conversation, by default
    assert not is_error and payload["inputs"][-1]["content"].startswith("requirement 9:")


def altered(cursor: str) -> list[str]:
    middle = len(cursor) // 2
    flipped = cursor[:middle] + ("A" if cursor[middle] != "A" else "B") + cursor[middle + 1 :]
    return [flipped, cursor[:-1], cursor[1:], cursor + "A", cursor + "=", cursor.lower(), " " + cursor, cursor[::-1]]


def test_altered_and_garbage_cursors_are_refused(client: StdioClient, small_tree: Corpus) -> None:
    for tool, arguments in ((CONVERSATIONS, {"limit": 2}), (INPUTS, {"limit": 1})):
        cursor = first_cursor(client, tool, arguments)
        for bad in [*altered(cursor), "garbage", "!!!!", "A" * 5000, "é" * 10, "\x00", "[1,2]", 7, 1.5, True, [cursor], {"c": 1}]:
            assert_invalid_cursor(client, tool, {**arguments, "cursor": bad})
        for none in ("", None):  # "no cursor", as an empty filter is no filter
            payload, is_error = client.call(tool, {**arguments, "cursor": none})
            assert not is_error and payload["nextCursor"] is not None


def test_forged_cursors_beyond_sqlites_integers_are_refused(client: StdioClient, small_tree: Corpus) -> None:
    """A cursor has no secret, so anyone can tag a position of their own (server/cursor.py). One with a
    number SQLite cannot bind is the caller's mistake, not a fault of the index (it used to fail
    inside the query and put the index into back-off)."""
    conversations = conversations_request({}, SOURCE).query
    inputs = inputs_request({}, SOURCE).query
    for tool, query, position in (
        (CONVERSATIONS, conversations, ["c", 10**30, "w1"]),
        (CONVERSATIONS, conversations, ["c", -(2**63) - 1, "w1"]),
        (INPUTS, inputs, ["i", 2**63, None, None]),
        (INPUTS, inputs, ["i", 3, None, 2**64]),
    ):
        assert_invalid_cursor(client, tool, {"cursor": cursor.encode(query, position)})
    # The same forgery within range is a position like any other: the index still answers.
    payload, is_error = client.call(CONVERSATIONS, {"cursor": cursor.encode(conversations, ["c", 2**63 - 1, "w1"])})
    assert not is_error and payload["conversations"], payload


def test_queries_of_a_callers_megabytes_are_not_kept(small_tree: Corpus, tmp_path: Path) -> None:
    """The cursor's key is kept per query (server/cursor.py), but the agent and status filters have no
    length limit: a caller sending a cursor with a new long filter at each call made the server hold
    all of them (740 MB after 300 calls over HTTP; found by an independent attack)."""
    import tracemalloc

    svc = Service(small_tree.path, tmp_path / "index.sqlite")
    svc.start()
    well_formed = "A" * 40  # decoded and tagged before it is refused: the query's key is made
    try:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for n in range(40):
            agent = f"{n}" + "x" * 200_000
            result = svc.call(CONVERSATIONS, {"agent": agent, "status": agent, "cursor": well_formed}, SOURCE)
            assert result.is_error and result.payload["error"]["code"] == "invalid_cursor", result.payload
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    finally:
        svc.close()
    assert held < 2_000_000, f"{held:,} bytes held after 40 calls with 400 KB of filters each"


def test_a_cursor_survives_an_index_rebuild(small_tree: Corpus, tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    queries: list[tuple[str, dict[str, Any]]] = [
        (CONVERSATIONS, {"scope": "descendants", "limit": 5}),
        (INPUTS, {"limit": 3, "maxChars": 100}),
    ]
    with memory_client_for(small_tree.path, db, source=SOURCE) as client:
        cursors = [first_cursor(client, tool, arguments) for tool, arguments in queries]
    for path in tmp_path.glob("index.sqlite*"):
        path.unlink()
    with memory_client_for(small_tree.path, db, source=SOURCE) as client:
        for (tool, arguments), cursor in zip(queries, cursors):
            got = client.call(tool, {**arguments, "cursor": cursor})
            oracle = reference.list_user_inputs if tool == INPUTS else reference.list_conversations
            page_one, _ = oracle(small_tree.path, arguments, SOURCE)
            same_answer(got, oracle(small_tree.path, {**arguments, "cursor": page_one["nextCursor"]}, SOURCE))
    assert db.exists()


def test_inputs_rewritten_under_a_cursor_are_refused(client: StdioClient, corpus: Corpus) -> None:
    corpus.write(SOURCE, session("one", "two", "three", "four"))
    cursor = first_cursor(client, INPUTS, {"limit": 2})
    corpus.write(SOURCE, session("one", "two", "three", "four", "five"))  # appended: the cursor holds
    payload, is_error = client.call(INPUTS, {"limit": 2, "cursor": cursor})
    assert not is_error and [item["content"] for item in payload["inputs"]] == ["one", "two"]
    doc = session("zero", "one", "two", "three", "four")  # history rewritten: the place holds another input
    for message in doc["messages"]:
        message["id"] = "rewritten-" + message["id"]
    corpus.write(SOURCE, doc)
    assert_invalid_cursor(client, INPUTS, {"limit": 2, "cursor": cursor})


def test_pages_of_inputs_with_long_message_ids_reach_the_end(client: StdioClient, corpus: Corpus) -> None:
    """A messageId may be of any length; the cursor that names the next input stays within what a
    cursor may be (found by an independent test: such a cursor was refused as too long)."""
    doc = session("oldest", "older", "newer", "newest")
    for message, long_id in zip(doc["messages"][::2], ["中" * 60, "😀" * 1000, "y" * 400, "z"]):
        message["id"] = long_id
    corpus.write(SOURCE, doc)
    pages = page_through(client.call, INPUTS, {}, [1])
    assert [item["content"] for page in pages for item in page["inputs"]] == ["newest", "newer", "older", "oldest"]
    assert all(len(page["nextCursor"] or "") <= cursor.MAX_CURSOR_CHARS for page in pages)


def test_an_input_longer_than_the_budget_is_passed_over(client: StdioClient, corpus: Corpus) -> None:
    corpus.write(SOURCE, session("a" * 50, "b" * 10, "c" * 50))
    pages = page_through(client.call, INPUTS, {"maxChars": 20}, [5])
    shown = [[(item["content"], item["truncated"]) for item in page["inputs"]] for page in pages]
    assert shown == [[("c" * 20, True)], [("a" * 10, True), ("b" * 10, False)], [("a" * 20, True)], []]


# --- the tree ----------------------------------------------------------------------------------


def same_as_reference(client: StdioClient, corpus: Corpus, arguments: dict[str, Any], limits: list[int]) -> list[dict[str, Any]]:
    """Page through with both, each following its own cursors; return the rows."""
    ours, theirs, rows = dict(arguments), dict(arguments), []
    for page in range(1000):
        ours["limit"] = theirs["limit"] = limits[page % len(limits)]
        got, want = client.call(CONVERSATIONS, ours), reference.list_conversations(corpus.path, theirs, SOURCE)
        same_answer(got, want)
        rows += got[0]["conversations"]
        if got[0]["nextCursor"] is None:
            return rows
        ours["cursor"], theirs["cursor"] = got[0]["nextCursor"], want[0]["nextCursor"]
    raise AssertionError("the pages never ended")


def test_a_chain_deeper_than_the_bound(client: StdioClient, corpus: Corpus) -> None:
    corpus.write(SOURCE, session("orchestrate"))
    parent = SOURCE
    for depth in range(1, DESCENDANTS_MAX_DEPTH + 6):
        write_child(corpus, f"d{depth:03d}", parent, updated=depth)
        parent = f"d{depth:03d}"
    rows = same_as_reference(client, corpus, {"scope": "descendants"}, [100])
    assert [row["depth"] for row in rows] == list(range(DESCENDANTS_MAX_DEPTH, 0, -1))
    assert rows[-1]["parentConversationId"] == SOURCE and rows[0]["parentConversationId"] == rows[1]["conversationId"]


def test_a_wide_tree(client: StdioClient, corpus: Corpus) -> None:
    corpus.write(SOURCE, session("orchestrate"))
    for n in range(120):
        write_child(corpus, f"c{n:03d}", SOURCE, updated=n % 17, status="waiting" if n % 3 else "idle")
        if n % 10 == 0:
            for m in range(5):
                write_child(corpus, f"c{n:03d}-{m}", f"c{n:03d}", updated=n + m)
    write_child(corpus, "stranger", "nobody", updated=1)
    corpus.write("fork", session("x", created_from={"kind": "branch", "sourceSessionId": SOURCE}))
    rows = same_as_reference(client, corpus, {"scope": "descendants"}, [9, 100, 1])
    assert len(rows) == 120 + 12 * 5
    same_as_reference(client, corpus, {"scope": "descendants", "status": "waiting"}, [13])
    same_as_reference(client, corpus, {"scope": "descendants", "conversationIds": ["c010-1", "c011", "stranger", "fork", SOURCE]}, [2])


def test_cycles_and_self_references_end_the_walk(client: StdioClient, corpus: Corpus) -> None:
    corpus.write(SOURCE, session("orchestrate", created_from=mcp_child_of("b")))  # orch -> a -> b -> orch
    write_child(corpus, "a", SOURCE, updated=1)
    write_child(corpus, "b", "a", updated=2)
    write_child(corpus, "b-kid", "b", updated=3)
    write_child(corpus, "me", "me", updated=4)  # a self-reference, not below the source
    write_child(corpus, "x", "y", updated=5)  # a cycle not below the source
    write_child(corpus, "y", "x", updated=6)
    rows = same_as_reference(client, corpus, {"scope": "descendants"}, [2])
    assert {row["conversationId"]: row["depth"] for row in rows} == {"a": 1, "b": 2, "b-kid": 3, SOURCE: 3}


def test_a_source_that_is_its_own_child(client: StdioClient, corpus: Corpus) -> None:
    corpus.write(SOURCE, session("orchestrate", created_from=mcp_child_of(SOURCE)))
    write_child(corpus, "a", SOURCE, updated=1)
    rows = same_as_reference(client, corpus, {"scope": "descendants"}, [1])
    assert {row["conversationId"]: row["depth"] for row in rows} == {"a": 1, SOURCE: 1}
    same_as_reference(client, corpus, {"scope": "children"}, [1])


@pytest.mark.parametrize("watch", [False, True])
def test_descendants_see_every_change_without_a_watcher(corpus: Corpus, tmp_path: Path, watch: bool) -> None:
    """Without a watcher the whole tree is re-checked: an in-place edit deep in it shows at once."""
    corpus.write(SOURCE, session("orchestrate"))
    write_child(corpus, "a", SOURCE, updated=1)
    write_child(corpus, "a1", "a", updated=2)
    service = Service(corpus.path, tmp_path / "index.sqlite", watch=watch)
    service.start()
    try:
        def tree() -> dict[str, tuple[int, str]]:
            result = service.call(CONVERSATIONS, {"scope": "descendants"}, SOURCE)
            assert not result.is_error
            return {row["conversationId"]: (row["depth"], row["status"]) for row in result.payload["conversations"]}

        assert tree() == {"a": (1, "idle"), "a1": (2, "idle")}
        write_child(corpus, "a1", "a", updated=2, status="done")  # in place: the directory does not change
        write_child(corpus, "a1x", "a1", updated=3)  # created: it does
        assert tree() == {"a": (1, "idle"), "a1": (2, "done"), "a1x": (3, "idle")}
        corpus.delete("a")  # its subtree is cut off with it
        assert tree() == {}
        lookup = service.call(CONVERSATIONS, {"conversationIds": ["a1", "a1x", "a"]}, None)
        assert [row["conversationId"] for row in lookup.payload["conversations"]] == ["a1x", "a1"]
        write_child(corpus, "a1x", "a1", updated=3, status="waiting")
        lookup = service.call(CONVERSATIONS, {"conversationIds": ["a1x"], "status": "waiting"}, None)
        assert [row["conversationId"] for row in lookup.payload["conversations"]] == ["a1x"]
    finally:
        service.close()


def test_a_subtree_that_moves_moves_whole(client: StdioClient, corpus: Corpus) -> None:
    """The index's links follow an edge that changes, for everything below it."""
    corpus.write(SOURCE, session("orchestrate"))
    corpus.write("elsewhere", session("another orchestrator"))
    write_child(corpus, "a", SOURCE, updated=1)
    write_child(corpus, "a1", "a", updated=2)
    write_child(corpus, "a11", "a1", updated=3)
    write_child(corpus, "b", SOURCE, updated=4)
    assert len(same_as_reference(client, corpus, {"scope": "descendants"}, [2])) == 4
    write_child(corpus, "a1", "elsewhere", updated=5)  # a1 and a11 move under another orchestrator
    rows = same_as_reference(client, corpus, {"scope": "descendants"}, [2])
    assert [row["conversationId"] for row in rows] == ["b", "a"]
    corpus.write("elsewhere", session("now a worker", created_from=mcp_child_of("b")), how="atomic")
    rows = same_as_reference(client, corpus, {"scope": "descendants"}, [3])
    assert {row["conversationId"]: row["depth"] for row in rows} == {"a": 1, "b": 1, "elsewhere": 2, "a1": 3, "a11": 4}


# --- lookups by id ----------------------------------------------------------------------------


def test_lookup_by_id(client: StdioClient, small_tree: Corpus) -> None:
    ids = [f"w{n}" for n in range(8)] + ["w0-sub", "ghost", "other"]
    rows = same_as_reference(client, small_tree, {"conversationIds": ids}, [4])
    assert {row["conversationId"] for row in rows} == set(ids) - {"ghost"}
    rows = same_as_reference(client, small_tree, {"conversationIds": ids, "scope": "children", "agent": "codex"}, [100])
    assert [row["conversationId"] for row in rows] == ["w7", "w5", "w3", "w1"]
    payload, is_error = client.call(CONVERSATIONS, {"conversationIds": [f"w{n}" for n in range(MAX_CONVERSATION_IDS + 1)]})
    assert is_error and payload["error"]["code"] == "too_many_conversation_ids" and str(MAX_CONVERSATION_IDS) in payload["error"]["message"]
    payload, is_error = client.call(CONVERSATIONS, {"conversationIds": ["w1", "../etc/passwd"]})
    assert is_error and payload["error"]["code"] == "invalid_conversation_id" and "../etc/passwd" in payload["error"]["message"]


def test_the_sessions_directory_is_only_read(small_tree: Corpus, tmp_path: Path) -> None:
    before = {path.name: path.stat().st_mtime_ns for path in small_tree.path.iterdir()}
    with stdio_client_for(small_tree.path, tmp_path / "index.sqlite", source=SOURCE) as client:
        page_through(client.call, CONVERSATIONS, {"scope": "descendants"}, [3])
        page_through(client.call, INPUTS, {"maxChars": 50}, [2])
    assert {path.name: path.stat().st_mtime_ns for path in small_tree.path.iterdir()} == before
    assert not any(name.startswith("index") for name in os.listdir(small_tree.path))
