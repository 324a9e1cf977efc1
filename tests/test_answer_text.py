"""An answer's text content is the compact JSON of its payload, byte for byte what
`json.dumps(payload, ensure_ascii=False, separators=(",", ":"))` writes (the service makes it
with msgspec, which is faster): non-ASCII as itself, control characters escaped as the standard
library escapes them, keys in the payload's order."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ccweb_index.server.app import MAX_MESSAGE_BYTES, message_bytes, success_result
from ccweb_index.server.service import ToolResult

# Any text an answer can hold: every code point but the lone surrogates (no answer holds one:
# the session-file decoder and the SDK's request parser refuse them).
_TEXT = st.text(st.characters(exclude_categories=("Cs",)))
_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _TEXT
_JSON = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5), max_leaves=30
)


def reference_text(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


@given(st.dictionaries(_TEXT, _JSON, max_size=8))
def test_text_is_the_standard_librarys_compact_json(payload: dict[str, Any]) -> None:
    assert ToolResult(payload, False).text() == reference_text(payload)


def test_text_of_characters_json_escapes() -> None:
    payload = {"content": "".join(map(chr, range(0x80))) + "\u2028\u2029\x85 é 漢 😀", "n": None, "t": True}
    assert ToolResult(payload, False).text() == reference_text(payload)


# Texts long enough for message_bytes to measure them rather than bound them by their length, each
# made of what grows most on the wire: control characters (escaped twice), quotes and backslashes
# (escaped again in the text block), astral characters (4 bytes each, twice).
_ON_THE_EDGE = MAX_MESSAGE_BYTES // 8
_HOSTILE = {
    "control": "\x01\x1f",
    "quotes and backslashes": '"\\',
    "astral": "😀",
    "mixed": 'a\x00"é\\漢😀\n',
}


@pytest.mark.parametrize("unit", _HOSTILE.values(), ids=_HOSTILE)
def test_message_bytes_bounds_the_message_the_sdk_writes(unit: str) -> None:
    """What `ccweb_index.server.app` refuses as answer_too_large is measured against the stdio line the
    SDK writes for the success (`model_dump_json`, as mcp.server.stdio does): never less, and not
    much more."""
    payload = {"conversations": [{"conversationId": "c", "title": unit * (_ON_THE_EDGE // len(unit) + 1)}]}
    text = ToolResult(payload, False).text()
    success = success_result(text, payload)
    line = types.JSONRPCResponse(jsonrpc="2.0", id=2**53, result=success).model_dump_json(by_alias=True, exclude_unset=True)
    written = len(line.encode()) + 1  # and its newline
    assert written <= message_bytes(text) < written + 8192
