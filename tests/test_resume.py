"""Resuming a grown session file from its checkpoint gives what a full parse gives (issue 10, item 3).

`resume_session` reads only what follows the checkpoint of the file's previous version. These
tests hold it to `parse_session`: for any previous version and any next version (appended to,
its header changed, its last message still being written, an earlier message edited, the prefix
reformatted, a duplicate "messages" key, broken), either it declines (None, and the caller parses
the whole file) or its answer, with the inputs the index keeps from the previous version, is the
full parse's answer exactly, checkpoint included.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from ccweb_index.indexer.sessionfile import (
    FIRST_KNOWN,
    NEWEST_KNOWN,
    Checkpoint,
    ParsedSession,
    Unreadable,
    parse_session,
    parse_time,
    resume_session,
)

from strategies import created_froms, message_lists, messages, time_values

HEADER_KEYS = ("title", "agent", "status", "createdAt", "updatedAt", "createdFrom")


def headers() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "title": st.sampled_from(["t", "a longer title", "日本語 😀"]),
            "agent": st.sampled_from(["claude", "codex"]),
            "status": st.sampled_from(["running", "done", "waiting", ""]),
            "createdAt": time_values(),
            "updatedAt": time_values(),
            "createdFrom": created_froms(),
        },
    )


def encode(header: dict[str, Any], items: list[Any], *, after: bool, indent: int | None, ascii: bool) -> bytes:
    """cc-web's way: the whole document written again, header before (or partly after) the array."""
    keys = list(header)
    split = len(keys) // 2 if after else len(keys)
    doc = {k: header[k] for k in keys[:split]} | {"messages": items} | {k: header[k] for k in keys[split:]}
    return json.dumps(doc, ensure_ascii=ascii, indent=indent).encode()


def parse_or_none(data: bytes) -> ParsedSession | None:
    try:
        return parse_session(data, checkpoint_from=0)
    except Unreadable:
        return None


def assert_same(resumed: ParsedSession, full: ParsedSession, before: ParsedSession, cp: Checkpoint) -> None:
    assert resumed.inputs_before == cp.inputs
    assert before.user_inputs[: cp.inputs] + resumed.user_inputs == full.user_inputs
    for name in ("title", "agent", "status", "created_at_ms", "updated_at_ms", "created_from_kind", "created_from_source"):
        assert getattr(resumed, name) == getattr(full, name), name
    assert (resumed.checkpoint is None) == (full.checkpoint is None)
    if resumed.checkpoint is not None and full.checkpoint is not None:
        ours, theirs = resumed.checkpoint, full.checkpoint
        assert (ours.cut, ours.crc, ours.region, ours.messages, ours.inputs) == (
            theirs.cut, theirs.crc, theirs.region, theirs.messages, theirs.inputs
        )  # fmt: skip


@st.composite
def versions(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A file, and its next version: usually grown by appends, sometimes changed in other ways."""
    old_items = draw(message_lists())
    new_items = list(old_items)
    change = draw(st.sampled_from(["append", "append", "append", "last", "earlier", "shrink", "none"]))
    if change == "last" and new_items:
        new_items[-1] = draw(messages())
    elif change == "earlier" and len(new_items) > 1:
        new_items[draw(st.integers(0, len(new_items) - 2))] = draw(messages())
    elif change == "shrink" and new_items:
        del new_items[draw(st.integers(0, len(new_items) - 1)) :]
    if change != "none":
        new_items += draw(st.lists(messages(), max_size=4))
    fmt = {"indent": draw(st.sampled_from([None, 2])), "ascii": draw(st.booleans())}
    old = encode(draw(headers()), old_items, after=draw(st.booleans()), **fmt)
    if draw(st.integers(0, 5)) == 0:
        fmt = {"indent": draw(st.sampled_from([None, 1])), "ascii": draw(st.booleans())}
    new = encode(draw(headers()), new_items, after=draw(st.booleans()), **fmt)
    damage = draw(st.sampled_from(["none"] * 6 + ["duplicate", "truncate", "garbage", "bad-utf8"]))
    if damage == "duplicate":  # a second top-level "messages" key, after the real one
        new = new.rstrip()[:-1] + b', "messages": []}'
    elif damage == "truncate":
        new = new[: draw(st.integers(0, len(new) - 1))]
    elif damage == "garbage":
        at = draw(st.integers(0, len(new) - 1))
        new = new[:at] + draw(st.sampled_from([b"]", b",", b"}", b'"', b"x"])) + new[at + 1 :]
    elif damage == "bad-utf8":
        new = new[:-1] + b"\xff}"
    return old, new


@given(versions())
def test_resume_gives_what_a_full_parse_gives(pair: tuple[bytes, bytes]) -> None:
    old, new = pair
    before = parse_or_none(old)
    assume(before is not None and before.checkpoint is not None)
    assert before is not None and before.checkpoint is not None
    cp = before.checkpoint
    resumed = resume_session(new, cp)
    full = parse_or_none(new)
    if full is None:
        assert resumed is None, "a file that does not parse must not be resumed"
        return
    if resumed is not None:
        assert_same(resumed, full, before, cp)


@given(headers(), headers(), message_lists(), st.lists(messages(), min_size=1, max_size=4), st.booleans())
def test_an_append_is_resumed(old_header: dict[str, Any], new_header: dict[str, Any], items: list[Any], added: list[Any], after: bool) -> None:
    """Appending messages (the last one rewritten or not) with any header change is resumed, not
    parsed again, unless the new header lacks a time the old one had (the prefix's was not computed)."""
    assume(items)
    old = encode(old_header, items, after=after, indent=None, ascii=False)
    new = encode(new_header, items + added, after=after, indent=None, ascii=False)
    before = parse_session(old, checkpoint_from=0)
    assert before.checkpoint is not None
    full = parse_session(new, checkpoint_from=0)
    resumed = resume_session(new, before.checkpoint)
    known = before.checkpoint.times_known
    needs_unknown_time = (parse_time(new_header.get("createdAt")) is None and not known & FIRST_KNOWN) or (
        parse_time(new_header.get("updatedAt")) is None and not known & NEWEST_KNOWN
    )
    assert (resumed is None) == needs_unknown_time
    if resumed is not None:
        assert_same(resumed, full, before, before.checkpoint)


def test_a_changed_prefix_is_not_resumed() -> None:
    items = [{"role": "user", "content": f"input {i}", "id": str(i)} for i in range(5)]
    before = parse_session(encode({}, items, after=False, indent=None, ascii=False), checkpoint_from=0)
    assert before.checkpoint is not None
    edited = [dict(items[0], content="INPUT 0"), *items[1:], {"role": "user", "content": "new"}]
    assert resume_session(encode({}, edited, after=False, indent=None, ascii=False), before.checkpoint) is None
    streaming = [*items[:-1], dict(items[-1], content="input 4, more"), {"role": "user", "content": "new"}]
    resumed = resume_session(encode({}, streaming, after=False, indent=None, ascii=False), before.checkpoint)
    assert resumed is not None  # the last element is always read again
    assert [i.content for i in resumed.user_inputs] == ["input 4, more", "new"]
    assert resumed.inputs_before == 4
