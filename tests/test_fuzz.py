"""Generated session files and tool arguments: the service must answer exactly as the reference.

The default profile is small enough for CI. For a long run (the `slow` tests at full size):
    HYPOTHESIS_PROFILE=long python -m pytest --timeout=0 -m slow
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweb_index.indexer.stored import stored_head
from ccweb_index.server.service import Service
from ccweb_index.server.tools import StoredInput, user_inputs_answer

import reference
import strategies as gen
from conftest import stdio_client_for
from test_contract import same_answer


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


@pytest.mark.slow
@settings(max_examples=8)
@given(files=gen.corpora(), source=gen.sources(gen.ID_POOL), calls=calls)
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
            last_good = {
                name[: -len(".json")]: (data, (sessions / name).stat().st_mtime_ns // 1_000_000)
                for name, data in files.items()
                if not isinstance(reference.parse_document(data), reference.Unreadable)
            }
            for name, data in changes.items():
                (sessions / name).write_bytes(data)
            for name, arguments in calls:
                result = service.call(name, arguments, source)
                tool = reference.list_user_inputs if name == "ccweb_list_user_inputs" else reference.list_conversations
                same_answer((result.payload, result.is_error), tool(sessions, arguments, source, last_good))
        finally:
            service.close()


@given(
    texts=gen.input_texts(),
    limit=st.integers(1, 50),
    max_chars=st.integers(1, 1000),
)
def test_budget_allocation_properties(texts: list[str], limit: int, max_chars: int) -> None:
    # As the index stores them: the head and the full length (indexer.stored).
    stored = [StoredInput(f"m{n}", None, stored_head(text), len(text)) for n, text in enumerate(texts)]
    answer = user_inputs_answer("c", limit, max_chars, len(stored), list(reversed(stored))[:limit])
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
