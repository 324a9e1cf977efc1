"""Generated session files and tool arguments: the service must answer exactly as the reference.

The default profile is small enough for CI. For a long run (the `slow` tests at full size):
    HYPOTHESIS_PROFILE=long python -m pytest --timeout=0 -m slow
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from ccweb_index.indexer.stored import stored_head
from ccweb_index.server.service import Service
from ccweb_index.server.tools import InputsRequest, StoredInput, user_inputs_answer

import reference
import strategies as gen
from conftest import THOROUGH, stdio_client_for
from test_contract import same_answer

INPUTS, CONVERSATIONS = "ccweb_list_user_inputs", "ccweb_list_conversations"


def write_corpus(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)


calls = st.lists(
    st.one_of(
        st.tuples(st.just("ccweb_list_conversations"), gen.tool2_args()),
        st.tuples(st.just("ccweb_list_user_inputs"), gen.tool1_args(gen.ID_POOL)),
    ),
    min_size=1,
    max_size=6,
)


def expected(name: str, sessions: Path, arguments: dict[str, Any], source: str | None) -> tuple[dict[str, Any], bool]:
    tool = reference.list_user_inputs if name == "ccweb_list_user_inputs" else reference.list_conversations
    return tool(sessions, arguments, source)


@pytest.mark.slow
@given(files=gen.corpora(), source=gen.sources(gen.ID_POOL), calls=calls, watch=st.booleans())
def test_service_matches_reference(files: dict[str, bytes], source: str | None, calls: list[Any], watch: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp) / "sessions"
        write_corpus(sessions, files)
        service = Service(sessions, Path(tmp) / "index.sqlite", watch=watch)
        service.start()
        try:
            for name, arguments in calls:
                result = service.call(name, arguments, source)
                same_answer((result.payload, result.is_error), expected(name, sessions, arguments, source))
        finally:
            service.close()


# Each example starts a server (about a second of CPU): a few by default, as the answers themselves are
# fuzzed in process above; more in the thorough run.
@pytest.mark.slow
@settings(max_examples=8 if THOROUGH else 4)
# An environment variable cannot hold a NUL (exec refuses it): no launcher can pass such a source.
@given(files=gen.corpora(), source=gen.sources(gen.ID_POOL).filter(lambda s: s is None or "\0" not in s), calls=calls)
def test_stdio_server_matches_reference(files: dict[str, bytes], source: str | None, calls: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp) / "sessions"
        write_corpus(sessions, files)
        env = {} if source is None else {"CCWEB_SOURCE_SESSION_ID": source}
        with stdio_client_for(sessions, Path(tmp) / "index.sqlite", env=env) as client:
            for name, arguments in calls:
                same_answer(client.call(name, arguments), expected(name, sessions, arguments, source))


@pytest.mark.slow
@given(files=gen.corpora(), changes=gen.corpora(), source=gen.sources(gen.ID_POOL), calls=calls)
def test_answers_follow_rewrites(
    files: dict[str, bytes], changes: dict[str, bytes], source: str | None, calls: list[Any]
) -> None:
    """Index one corpus, rewrite files in place (readable or not), answer: last good versions stand in."""
    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp) / "sessions"
        write_corpus(sessions, files)
        service = Service(sessions, Path(tmp) / "index.sqlite", watch=True)
        service.start()
        try:
            last_good = last_good_versions(sessions, files)
            for name, data in changes.items():
                (sessions / name).write_bytes(data)
            for name, arguments in calls:
                result = service.call(name, arguments, source)
                tool = reference.list_user_inputs if name == "ccweb_list_user_inputs" else reference.list_conversations
                same_answer((result.payload, result.is_error), tool(sessions, arguments, source, last_good))
        finally:
            service.close()


# A query to page through: its arguments without a cursor, and the limit of each page in turn.
queries = st.one_of(
    st.tuples(st.just(CONVERSATIONS), gen.tool2_args(), st.lists(st.integers(1, 4), min_size=1, max_size=3)),
    st.tuples(st.just(INPUTS), gen.tool1_args(gen.ID_POOL), st.lists(st.integers(1, 3), min_size=1, max_size=3)),
)


def last_good_versions(sessions: Path, files: dict[str, bytes]) -> dict[str, tuple[bytes, int]]:
    return {
        name[: -len(".json")]: (data, (sessions / name).stat().st_mtime_ns // 1_000_000)
        for name, data in files.items()
        if not isinstance(reference.parse_document(data), reference.Unreadable)
    }


@given(files=gen.corpora(), changes=st.none() | gen.corpora(), source=gen.sources(gen.ID_POOL), query=queries, data=st.data())
def test_pages_match_reference(
    files: dict[str, bytes], changes: dict[str, bytes] | None, source: str | None, query: Any, data: st.DataObject
) -> None:
    """Page to the end, each side following its own cursors, files rewritten after the first page:
    every page is the reference's, and an unchanged corpus gives the whole list exactly once."""
    name, arguments, limits = query
    arguments = {key: value for key, value in arguments.items() if key != "cursor"}
    if name == INPUTS:  # mostly a conversation that is there, and budgets that cut
        there = gen.corpus_ids(files) or [None]
        arguments["conversationId"] = data.draw(gen.weighted((3, st.sampled_from(there)), (1, st.just(arguments.get("conversationId")))))
        arguments["maxChars"] = data.draw(gen.weighted((3, st.sampled_from([1, 4, 12, 60])), (1, st.just(arguments.get("maxChars")))))
    tool = reference.list_user_inputs if name == INPUTS else reference.list_conversations
    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp) / "sessions"
        write_corpus(sessions, files)
        last_good = last_good_versions(sessions, files)
        service = Service(sessions, Path(tmp) / "index.sqlite", watch=True)
        service.start()
        try:
            ours, theirs, rows = dict(arguments), dict(arguments), []
            for page in range(100):
                ours["limit"] = theirs["limit"] = limits[page % len(limits)]
                got = service.call(name, ours, source)
                want = tool(sessions, theirs, source, last_good)
                same_answer((got.payload, got.is_error), want)
                if got.is_error or got.payload["nextCursor"] is None:
                    break
                rows += got.payload.get("conversations", [])
                ours["cursor"], theirs["cursor"] = got.payload["nextCursor"], want[0]["nextCursor"]
                if page == 0 and changes is not None:
                    for file_name, data in changes.items():
                        (sessions / file_name).write_bytes(data)
            else:
                raise AssertionError("the pages never ended")
            event(f"{name}: {'an error' if got.is_error else ('1 page', '2 pages', '3 pages or more')[min(page, 2)]}")
            if name == CONVERSATIONS and changes is None and not got.is_error:
                rows += got.payload["conversations"]
                whole, _ = tool(sessions, {**arguments, "limit": 100}, source, last_good)
                assert rows == whole["conversations"]
        finally:
            service.close()


@given(files=gen.corpora(), source=gen.sources(gen.ID_POOL), first=queries, second=queries)
def test_a_cursor_answers_only_its_own_query(files: dict[str, bytes], source: str | None, first: Any, second: Any) -> None:
    """The first query's cursor passed to the second: refused exactly when the reference refuses its own."""
    with tempfile.TemporaryDirectory() as tmp:
        sessions = Path(tmp) / "sessions"
        write_corpus(sessions, files)
        service = Service(sessions, Path(tmp) / "index.sqlite")
        service.start()
        try:
            (name, arguments, limits), (other, other_arguments, _) = first, second
            arguments = {**arguments, "cursor": None, "limit": limits[0]}
            tool = reference.list_user_inputs if name == INPUTS else reference.list_conversations
            got, (want, _) = service.call(name, arguments, source), tool(sessions, arguments, source)
            if got.is_error or got.payload["nextCursor"] is None:
                return
            other_tool = reference.list_user_inputs if other == INPUTS else reference.list_conversations
            theirs = {**other_arguments, "cursor": want["nextCursor"]}
            result = service.call(other, {**other_arguments, "cursor": got.payload["nextCursor"]}, source)
            same_answer((result.payload, result.is_error), other_tool(sessions, theirs, source))
        finally:
            service.close()


@given(
    texts=gen.input_texts(),
    limit=st.integers(1, 50),
    max_chars=st.integers(1, 1000),
)
def test_budget_allocation_properties(texts: list[str], limit: int, max_chars: int) -> None:
    # As the index stores them: the head and the full length (indexer.stored).
    stored = [StoredInput(n, f"m{n}", None, stored_head(text), len(text)) for n, text in enumerate(texts)]
    answer = user_inputs_answer(InputsRequest("c", limit, max_chars), list(reversed(stored))[: limit + 1])
    returned = answer["inputs"]
    recent = texts[-limit:]
    assert answer["totalChars"] == sum(item["contentChars"] for item in returned) <= max_chars
    assert answer["returnedCount"] == len(returned)
    # a suffix of the recent inputs, oldest first, every one whole except possibly the oldest
    assert [item["messageId"] for item in returned] == [f"m{n}" for n in range(len(texts) - len(returned), len(texts))]
    for position, item in enumerate(returned):
        original = texts[int(item["messageId"][1:])]
        assert item["originalChars"] == len(original)
        assert item["contentChars"] == len(item["content"])
        if item["truncated"]:
            assert position == 0 and item["content"] == original[: item["contentChars"]]
            assert 0 < item["contentChars"] < len(original)
            assert answer["totalChars"] == max_chars, "a cut spends the whole budget"
        else:
            assert item["content"] == original
    complete = len(returned) == len(recent) and not any(item["truncated"] for item in returned)
    assert answer["hasMore"] == (len(texts) > limit or not complete)
    if not complete and not (returned and returned[0]["truncated"]):
        left_out = recent[len(recent) - len(returned) - 1]
        assert len(left_out) > max_chars - answer["totalChars"], "an input that fit was left out"
