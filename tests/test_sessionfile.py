"""The cc-web file format mapping (indexer/sessionfile.py), field by field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweb_index.indexer import sessionfile
from ccweb_index.indexer.sessionfile import (
    Unreadable,
    format_time,
    is_valid_id,
    message_id,
    parse_session,
    parse_time,
    session_id_from_name,
    session_ids_among,
)

import reference
from strategies import valid_file_bytes


def parse(doc: Any) -> Any:
    return parse_session(json.dumps(doc, ensure_ascii=False).encode())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("abc.json", "abc"),
        ("A-b_9.json", "A-b_9"),
        ("x" * 128 + ".json", "x" * 128),
        ("x" * 129 + ".json", None),
        (".json", None),
        ("x.json.tmp", None),
        (".x.json", None),
        ("a b.json", None),
        ("é.json", None),
        ("a.JSON", None),
        ("a\n.json", None),
        ("a.json\n", None),
        ("ajson", None),
        ("a.jsonx", None),
    ],
)
def test_session_names(name: str, expected: str | None) -> None:
    assert session_id_from_name(name) == expected
    # A directory's names are picked out in one search (the sweep): each as it is alone, whichever
    # names stand beside it.
    assert session_ids_among([name]) == ([] if expected is None else [expected])
    assert session_ids_among(["a.json", name, "b.json"]) == ["a", *([] if expected is None else [expected]), "b"]


_NAME_PARTS = st.sampled_from(["a", "Z9", "-", "_", ".json", ".", "json", "\n", " ", "é", "x" * 127, "\x00"])


@given(st.lists(st.lists(_NAME_PARTS, max_size=4).map("".join), max_size=8))
@settings(max_examples=300, deadline=None)
def test_session_names_among_a_directory(names: list[str]) -> None:
    expected = [session_id for session_id in map(session_id_from_name, names) if session_id is not None]
    assert session_ids_among(names) == expected


@pytest.mark.parametrize("value", ["", "a/b", "../x", "a\n", "a\x00", "é", "x" * 129, 7, None, ["a"]])
def test_invalid_ids(value: Any) -> None:
    assert not is_valid_id(value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"[1, 2]", "not a JSON object"),
        (b'"a string"', "not a JSON object"),
        (b'{"title": "x"', "does not end with the '}' that closes its object"),
        (b'{"title": "caf\xc3', "does not end with the '}' that closes its object"),  # cut inside a character, too
        (b'{"title": NaN}', "invalid JSON"),
        (b'{"title": Infinity}', "invalid JSON"),
        (b'\xef\xbb\xbf{"title": "x"}', "byte-order mark"),
        (b'{"messages": [{"role": "assistant", "content": "\xff"}]}', "invalid UTF-8"),
        (b'{"title": "\\ud800"}', "invalid JSON"),
        (b'{"x": ' + b"[" * 20000 + b"]" * 20000 + b"}", "invalid JSON"),
        (b'{"a": 1} trailing', "invalid JSON"),
    ],
)
def test_unreadable_files(data: bytes, reason: str) -> None:
    with pytest.raises(Unreadable) as info:
        parse_session(data)
    assert reason in info.value.reason


@given(valid_file_bytes(), st.data())
def test_the_ends_of_a_whole_document_never_say_it_is_cut_short(data: bytes, pick: st.DataObject) -> None:
    """`cut_short` decides from a file's two ends without parsing it (a huge file mid-write is never
    handed to a worker); a document that parses must never be taken for one cut, whatever its
    whitespace, and a cut one keeps that reason however it is cut."""
    size = pick.draw(st.integers(1, sessionfile.ENDS_BYTES))
    assert sessionfile.cut_short(data[:size], data[-size:]) is None
    cut = pick.draw(st.integers(1, len(data) - 1))
    head = data[:cut]
    if head.rstrip(b" \t\n\r")[-1:] != b"}" and head.lstrip(b" \t\n\r")[:1] == b"{":
        with pytest.raises(Unreadable, match="does not end with the '}' that closes its object"):
            parse_session(head)


_BAD_UTF8 = [b"\xff", b"\xc0\xaf", b"\xe2\x28\xa1", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\x80"]


@given(
    st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='"\\'), max_size=40),
    st.sampled_from(_BAD_UTF8),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=1, max_value=9),
)
@settings(max_examples=300, deadline=None)
def test_invalid_utf8_is_found_across_slices(text: str, bad: bytes, at: int, slice_bytes: int) -> None:
    """The whole-file check goes a slice at a time: whichever slice boundaries fall inside a
    character, valid text passes, and a fault is reported at the byte where strict UTF-8 finds it."""
    before = f'{{"title": "{text[:at]}'.encode()
    after = f'{text[at:]}"}}'.encode()
    with pytest.raises(UnicodeDecodeError) as strict:
        (before + bad + after).decode("utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sessionfile, "_UTF8_SLICE", slice_bytes)
        assert parse_session(before + after).title == text
        with pytest.raises(Unreadable) as info:
            parse_session(before + bad + after)
    assert info.value.reason == f"invalid UTF-8 at byte {strict.value.start}"


@pytest.mark.parametrize("checkpoint_from", [None, 0])
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (b'"id": 1e400', (None, "hi", None)),
        (b'"id": 1.7976931348623159e308', (None, "hi", None)),
        (b'"createdAt": -1e400, "timestamp": "2026-01-01T00:00:00Z"', (None, "hi", 1767225600000)),  # null: falls back
        (b'"createdAt": "2026-01-01T00:00:00Z", "timestamp": 1e400', (None, "hi", 1767225600000)),
        (b'"content": ["a", 1e400, "b"], "id": "m"', ("m", "a\nb", None)),
    ],
)
def test_numbers_beyond_doubles_in_a_message_read_as_null(
    message: bytes, expected: tuple[Any, ...], checkpoint_from: int | None
) -> None:
    """As in the header (docs/decisions.md); a message's fields are decoded apart from the header's,
    and used to fail the file's parse with msgspec's error (found by an independent test)."""
    data = b'{"messages": [{"role": 1e400, "content": "skipped"}, {"role": "user", "content": "hi", ' + message + b"}]}"
    parsed = parse_session(data, checkpoint_from=checkpoint_from)
    assert [(i.message_id, i.content, i.created_at_ms) for i in parsed.user_inputs] == [expected]


def test_an_integer_beyond_pythons_limit_where_a_message_is_read_is_unreadable() -> None:
    with pytest.raises(Unreadable, match="4300 digits"):
        parse_session(b'{"messages": [{"role": "user", "content": "hi", "id": ' + b"1" * 4301 + b"}]}")


def test_duplicate_keys_last_wins() -> None:
    assert parse_session(b'{"title": "a", "title": "b"}').title == "b"


def test_fields_of_the_wrong_type_count_as_absent() -> None:
    parsed = parse({"title": 7, "agent": ["x"], "status": 3, "createdFrom": "mcp", "messages": {"0": {}}})
    assert (parsed.title, parsed.agent, parsed.status, parsed.created_from_kind, parsed.user_inputs) == (
        None, None, "idle", None, []
    )  # fmt: skip


def test_created_from_after_a_large_messages_array() -> None:
    messages = [{"role": "assistant", "content": "x" * 1000} for _ in range(2000)]
    data = json.dumps({"messages": messages, "createdFrom": {"kind": "mcp", "sourceSessionId": "s", "x": 1}})
    parsed = parse_session(data.encode())
    assert (parsed.created_from_kind, parsed.created_from_source) == ("mcp", "s")


def test_user_inputs_text_and_skips() -> None:
    parsed = parse(
        {
            "messages": [
                {"role": "user", "content": "plain", "id": "m1", "createdAt": "2026-11-29T08:00:00Z"},
                {"role": "user", "content": ["a", {"type": "text", "text": "b"}, {"type": "image"}, 5], "id": 7},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "out"}]},
                {"role": "user", "content": " \n\t "},
                {"role": "user", "content": {"text": "not a string or array"}},
                {"role": "User", "content": "wrong case role"},
                {"role": "assistant", "content": "reply", "ccwebPrompt": {"title": "form"}},
                {"role": "user", "content": "Q1 → yes", "timestamp": 1795939200000, "id": 1.5},
                {"role": "user", "content": [{"type": "text", "text": 5}, "", "x"]},
                "not an object",
            ]
        }
    )
    assert [(i.message_id, i.content) for i in parsed.user_inputs] == [
        ("m1", "plain"),
        ("7", "a\nb"),
        ("1.5", "Q1 → yes"),
        (None, "\nx"),
    ]
    assert parsed.user_inputs[2].created_at_ms == 1795939200000
    assert parsed.status == "idle", "the last element is not an object"


@pytest.mark.parametrize(
    ("status", "last", "expected"),
    [
        ("  Running ", None, "running"),
        ("   ", {"role": "assistant", "ccwebPrompt": {}}, "waiting"),
        (None, {"role": "assistant", "ccwebPrompt": {"fields": []}}, "waiting"),
        (None, {"role": "assistant", "ccwebPrompt": "not an object"}, "idle"),
        (None, {"role": "user", "ccwebPrompt": {}}, "idle"),
        (None, {"role": "assistant"}, "idle"),
        (None, None, "idle"),
    ],
)
def test_status(status: str | None, last: dict[str, Any] | None, expected: str) -> None:
    doc: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}] + ([last] if last else [])}
    if status is not None:
        doc["status"] = status
    assert parse(doc).status == expected


def test_created_and_updated_fallbacks() -> None:
    messages = [
        {"role": "user", "content": "a", "createdAt": "garbage", "timestamp": "2026-01-01T00:00:00Z"},
        {"role": "user", "content": "b", "createdAt": None, "timestamp": "2026-03-01T00:00:00Z"},
        {"role": "assistant", "content": "c", "createdAt": "2026-05-01T00:00:00Z"},
        {"role": "assistant", "content": "d", "createdAt": "2026-04-01T00:00:00Z"},
    ]
    parsed = parse({"messages": messages, "updatedAt": "not a time"})
    assert format_time(parsed.created_at_ms) == "2026-03-01T00:00:00.000Z", "first message time that parses"
    assert format_time(parsed.updated_at_ms) == "2026-05-01T00:00:00.000Z", "newest message time"
    parsed = parse({"messages": messages, "createdAt": 0, "updatedAt": "2026-11-29T09:00:00+01:00"})
    assert format_time(parsed.created_at_ms) == "1970-01-01T00:00:00.000Z"
    assert format_time(parsed.updated_at_ms) == "2026-11-29T08:00:00.000Z"
    assert parse({"messages": []}).updated_at_ms is None, "left to the file's mtime"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-29T08:00:00Z", "2026-11-29T08:00:00.000Z"),
        ("2026-11-29T08:00:00.1234567Z", "2026-11-29T08:00:00.123Z"),
        ("2026-11-29t08:00:00.5z", "2026-11-29T08:00:00.500Z"),
        ("2026-11-29 16:00:00+08:00", "2026-11-29T08:00:00.000Z"),
        ("2026-11-29T03:30:00-0430", "2026-11-29T08:00:00.000Z"),
        ("2026-11-29T10:00+02", "2026-11-29T08:00:00.000Z"),
        ("2026-11-29T08:00:00", None),
        ("2026-11-29T08:00:00,5Z", None),
        ("2026-11-29", None),
        ("2026-02-30T00:00:00Z", None),
        ("2026-11-29T24:00:00Z", None),
        ("2026-11-29T08:00:60Z", None),
        ("2026-11-29T24:00:00.000Z", None),
        ("2026-W48-7T08:00:00.000Z", None),
        ("2026-11-29T08:00:00.000Z", "2026-11-29T08:00:00.000Z"),
        ("0000-12-31T23:59:59.999Z", None),
        ("yesterday", None),
        ("\uff12\uff10\uff12\uff16-11-29T08:00:00Z", None),
        ("2026-11-29T08:00:00.\u0661Z", None),
        (1795939200000, "2026-11-29T08:00:00.000Z"),
        (1795939200000.9, "2026-11-29T08:00:00.000Z"),
        (-1.5, "1969-12-31T23:59:59.999Z"),
        (1e20, None),
        (True, None),
        (None, None),
        ({"t": 1}, None),
    ],
)
def test_times(value: Any, expected: str | None) -> None:
    assert format_time(parse_time(value)) == expected


# Each field of toISOString's shape drawn past its range (month 19, hour 24, day 00...), so that
# both valid and invalid times are common.
_FIELDS = st.tuples(
    st.integers(0, 9999), st.integers(0, 19), st.integers(0, 39),
    st.integers(0, 29), st.integers(0, 69), st.integers(0, 69), st.integers(0, 999),
)  # fmt: skip


# Microseconds an example: many of them, as a quarter of the drawn times are valid.
@settings(max_examples=1000)
@given(_FIELDS, st.integers(0, 23), st.sampled_from("-T:.Z5"))
def test_times_in_to_iso_string_shape(fields: tuple[int, ...], at: int, other: str) -> None:
    # That shape takes a fast path (the standard library's parser): it reads every such string as
    # the reference does, also with one character replaced.
    text = "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z".format(*fields)
    assert parse_time(text) == reference.parse_time(text)
    changed = text[:at] + other + text[at + 1 :]
    assert parse_time(changed) == reference.parse_time(changed)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("m1", "m1"), (42, "42"), (3.0, "3"), (1.5, "1.5"), (1e21, "1e+21"), (True, None), (None, None), ({}, None)],
)
def test_message_ids(value: Any, expected: str | None) -> None:
    assert message_id(value) == expected
