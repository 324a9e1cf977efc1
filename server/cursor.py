"""Page cursors: opaque to the caller, bound to the query that made them (pure functions).

A cursor is the base64url text of a position (compact JSON) followed by a tag: a BLAKE2b MAC of the
position keyed by the query's fingerprint (tool, conversation, scope, source, filters, ids). A cursor
passed with another query, cut, mistyped or altered fails the tag and is refused; nothing of a
refused cursor is ever used.

There is no secret (docs/decisions.md): a position is a sort key of the answer (updatedAt and id, or
an input's place in its conversation), never a row id or an offset, so a cursor holds across
processes sharing an index and across an index rebuild. Whoever forges a tag can only name another
position of a query they could make anyway.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

# Bumped when the position format changes: it keys the tag, so older cursors are refused cleanly.
CURSOR_FORMAT = 2
# Longer than any cursor this module makes (an id is at most 128 characters): the rest is refused unread.
MAX_CURSOR_CHARS = 512
_TAG_BYTES = 12


class BadCursor(ValueError):
    """The cursor is not one this query made."""


# Compact JSON, built once: `json.dumps` with these arguments makes a new encoder at every call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


# Queries of at most this many characters in all have their key kept: an agent pages through, and
# polls, the same few queries. A longer one is keyed afresh at each call, so the cache holds no
# caller's megabytes (the agent and status filters have no length limit; found by an independent attack).
KEPT_QUERY_CHARS = 4096


def _key(query: tuple[Any, ...]) -> bytes:
    return _kept_key(query) if _chars(query) <= KEPT_QUERY_CHARS else _make_key(query)


@functools.lru_cache(maxsize=256)
def _kept_key(query: tuple[Any, ...]) -> bytes:
    return _make_key(query)


def _make_key(query: tuple[Any, ...]) -> bytes:
    return hashlib.blake2b(_COMPACT.encode([CURSOR_FORMAT, *query]).encode(), digest_size=32).digest()


def _chars(value: object) -> int:
    if isinstance(value, str):
        return len(value)
    return sum(map(_chars, value)) if isinstance(value, tuple) else 0


def _tag(query: tuple[Any, ...], payload: bytes) -> bytes:
    return hashlib.blake2b(payload, key=_key(query), digest_size=_TAG_BYTES).digest()


def encode(query: tuple[Any, ...], position: Sequence[Any]) -> str:
    payload = _COMPACT.encode(list(position)).encode()
    return base64.urlsafe_b64encode(payload + _tag(query, payload)).rstrip(b"=").decode()


def unpadded_b64(text: str) -> bytes | None:
    """The bytes `text` spells in unpadded URL-safe base64, when it is their only spelling, as the
    encoders here write it; None for anything else: b64decode skips characters outside the alphabet,
    takes padding, and ignores the unused low bits of the last character."""
    if not text.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == text else None


def decode(query: tuple[Any, ...], cursor: str) -> list[Any]:
    """The position `encode(query, position)` was given. Raises BadCursor for anything else."""
    raw = unpadded_b64(cursor) if 0 < len(cursor) <= MAX_CURSOR_CHARS else None
    if raw is None or len(raw) <= _TAG_BYTES:
        raise BadCursor
    payload, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
    if not hmac.compare_digest(tag, _tag(query, payload)):
        raise BadCursor
    try:
        position = json.loads(payload)
    except ValueError:
        raise BadCursor from None
    if not isinstance(position, list):
        raise BadCursor
    return position
