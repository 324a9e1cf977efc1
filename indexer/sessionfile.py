"""The cc-web session file format, and nothing else.

This is the one module that knows how a cc-web conversation is stored: which file names are
sessions, what makes a file unreadable, and how its fields map to what the index keeps. When cc-web's
format moves, this is the place to change. Everything here is a pure function of bytes and names.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import functools
import json
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import msgspec

_ID = r"[A-Za-z0-9_-]{1,128}"
SESSION_ID_RE = re.compile(_ID)
SUFFIX = ".json"
# The id and the suffix in one match.
_FILE_NAME_RE = re.compile(f"({_ID}){re.escape(SUFFIX)}")
# The same, found among names joined by "/", which no name can hold: one search in C for a whole
# directory instead of a match per entry (a sweep of the directory lists every entry, often).
_FILE_NAMES_RE = re.compile(f"(?<![^/])({_ID}){re.escape(SUFFIX)}(?![^/])")


def is_valid_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and SESSION_ID_RE.fullmatch(value) is not None


def session_id_from_name(name: str) -> str | None:
    """The conversation id a directory entry name stands for, or None if it is not a session name."""
    match = _FILE_NAME_RE.fullmatch(name)
    return None if match is None else match[1]


def session_ids_among(names: list[str]) -> list[str]:
    """The conversation ids that directory entry names stand for, as session_id_from_name gives."""
    return _FILE_NAMES_RE.findall("/".join(names))


class Unreadable(Exception):
    """The file is not a readable session: empty, not JSON, or not a JSON object."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class UserInput:
    message_id: str | None
    created_at_ms: int | None
    content: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a session file's messages array can be resumed from, and what came before that point.

    The prefix is the array's bytes from its "[" up to the start of its last element: the last
    element is always read again, as cc-web may still be filling it in. `region` proves the prefix
    unchanged as far as an append-only reader can afford to look: the crc32 of its last
    REGION_BYTES (all of it when shorter), so that resuming reads the header, that region and the
    new tail, never the whole prefix (docs/design.md, "Appends"). `crc` is the crc32 of the whole
    prefix as indexed, carried forward from the tail at each resume; it is what a checkpoint
    without a region (an older index's) is checked against, by reading the whole prefix. The
    times are the prefix's first and newest message times, valid only where `times_known` says
    they were computed (a full parse computes them only when the header lacks createdAt /
    updatedAt).
    """

    cut: int
    crc: int
    messages: int
    inputs: int
    first_time: int | None
    newest_time: int | None
    times_known: int  # FIRST_KNOWN | NEWEST_KNOWN
    region: int | None = None  # None: an older index's checkpoint, checked by the whole-prefix `crc`


# How much of the prefix, just before the cut, a resume reads and checks (see Checkpoint).
REGION_BYTES = 64 * 1024


def region_size(cut: int) -> int:
    """The bytes of a prefix of `cut` bytes that its region check covers."""
    return min(cut, REGION_BYTES)


FIRST_KNOWN, NEWEST_KNOWN = 1, 2


@dataclass(slots=True)
class ParsedSession:
    title: str | None = None
    agent: str | None = None
    status: str = "idle"
    created_at_ms: int | None = None
    # None when neither the file nor any message says; the caller falls back to the file's mtime.
    updated_at_ms: int | None = None
    created_from_kind: str | None = None
    created_from_source: str | None = None
    user_inputs: list[UserInput] = field(default_factory=list)
    # Resumed from a checkpoint: this many user inputs come before `user_inputs` (the index has them).
    inputs_before: int = 0
    checkpoint: Checkpoint | None = None


# Message bodies are kept raw (undecoded) so that only user messages pay for building strings.
class _Message(msgspec.Struct):
    role: Any = None
    content: msgspec.Raw = msgspec.Raw(b"null")
    id: Any = None
    createdAt: Any = None
    timestamp: Any = None
    ccwebPrompt: msgspec.Raw = msgspec.Raw(b"null")


class _Block(msgspec.Struct):
    type: Any = None
    text: Any = None


class _Header(msgspec.Struct):
    """The fields of a session file before its messages, as both decoders below read them."""

    title: Any = None
    agent: Any = None
    status: Any = None
    createdAt: Any = None
    updatedAt: Any = None
    createdFrom: Any = None


class _Document(_Header):
    messages: msgspec.Raw = msgspec.Raw(b"null")


class _WholeDocument(_Header):
    """_Document with its messages decoded in the same pass: a file that needs no checkpoint (and
    whose messages are all objects) is walked once instead of twice."""

    messages: list[_Message] | None = None


_document = msgspec.json.Decoder(_Document)
_whole_document = msgspec.json.Decoder(_WholeDocument)
_messages = msgspec.json.Decoder(list[_Message])
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])
_message = msgspec.json.Decoder(_Message)
_blocks = msgspec.json.Decoder(list[str | _Block])
_any = msgspec.json.Decoder()
_string = msgspec.json.Decoder(str)


def parse_session(data: bytes, *, checkpoint_from: int | None = None) -> ParsedSession:
    """Parse one session file's bytes. Raises Unreadable with a short reason.

    `checkpoint_from`: a file of at least this many bytes gets a `checkpoint`, from which its next
    version can be resumed (`resume_session`) if it only grew. None: never.
    """
    _check_text(data)
    wants_checkpoint = checkpoint_from is not None and len(data) >= checkpoint_from
    try:
        whole = None if wants_checkpoint else _decode_whole(data)
        if whole is not None:
            parsed, _ = _from_document(whole, whole.messages or [], _Walk.fresh(whole))
            return parsed
        doc = _decode_document(data)
        parsed, walk = _from_document(doc, _decode_messages(doc.messages), _Walk.fresh(doc))
    except RecursionError:
        raise Unreadable("invalid JSON: nested too deeply") from None
    except msgspec.ValidationError as exc:
        # A number out of range in a message, which only the message's own decode meets: the slow
        # path `_decode_document` takes for the header. No checkpoint: its offsets would be the copy's.
        if "out of range" not in str(exc):
            raise
        return parse_session(_without_huge_numbers(data))
    if wants_checkpoint and walk is not None:
        parsed.checkpoint = _checkpoint(data, doc.messages, walk)
    return parsed


def _decode_whole(data: bytes) -> _WholeDocument | None:
    """The document in one pass, or None when anything about it is unusual (not JSON, a message
    that is not an object, a number out of range...): then the two-pass decode below decides, with
    its reasons, so that both give the same result for every file."""
    try:
        return _whole_document.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def resume_session(data: bytes, checkpoint: Checkpoint) -> ParsedSession | None:
    """Parse a new version of a file from its old version's checkpoint, reading only what follows it.

    None when that is not sound: the prefix moved or changed, the document no longer has exactly one
    top-level messages array, the times the header lacks were not computed for the prefix, or
    anything else is odd (then a full parse gives the answer, or the reason it is unreadable). The
    result is what `parse_session` gives, except that `user_inputs` holds only the inputs after the
    first `inputs_before` (which the index keeps from the checkpoint's version).
    """
    start = messages_offset(data)
    if start is None:
        return None
    cut = checkpoint.cut
    checked = data[start + cut - (cut if checkpoint.region is None else region_size(cut)) : start + cut]
    return resume_parts(data[: start + 1], checked, data[start + cut :], checkpoint)


def resume_parts(head: bytes, checked: bytes, rest: bytes, checkpoint: Checkpoint) -> ParsedSession | None:
    """`resume_session` from the parts of the file it needs, so that a caller can read only those:
    `head`, the document up to and including the messages array's "["; `checked`, the prefix's
    bytes that prove it unchanged (its region, or the whole prefix for a checkpoint without one);
    `rest`, everything from the cut to the end of the file."""
    cut, start = checkpoint.cut, len(head) - 1
    whole = checkpoint.region is None
    if len(checked) != (cut if whole else region_size(cut)) or not rest or rest[:1] in b"]":
        return None
    if zlib.crc32(checked) != (checkpoint.crc if whole else checkpoint.region):
        return None
    # The array without its prefix: "[" followed by the element the checkpoint stopped at.
    spliced = head + rest
    try:
        _check_text(spliced)
        doc = _document.decode(spliced)
        if _head(doc.messages) != b"[" or not _only_messages_at(spliced, start, len(doc.messages)):
            return None
        walk = _Walk.resumed(doc, checkpoint)
        if walk is None:
            return None
        parsed, last = _from_document(doc, _decode_messages(doc.messages), walk)
    except (Unreadable, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if last is None or walk.messages == checkpoint.messages:
        return None  # no element after the prefix: a full parse says whether the file is valid
    parsed.inputs_before = checkpoint.inputs
    tail = _checkpoint(spliced, doc.messages, last, at=start)
    if tail is not None:
        grown = memoryview(rest)[: tail.cut - 1]  # the tail's own prefix, without its "["
        new_cut = cut + len(grown)
        parsed.checkpoint = Checkpoint(
            new_cut, zlib.crc32(grown, checkpoint.crc),
            tail.messages, tail.inputs, tail.first_time, tail.newest_time, tail.times_known,
            zlib.crc32((checked[-REGION_BYTES:] + grown)[-region_size(new_cut) :]),
        )  # fmt: skip
    return parsed


# Whole-file UTF-8 checks go a slice at a time: one str of the whole file would cost up to 4x its
# size. Slices this small stay in the CPU's caches and reuse the allocator's memory; 1 MiB slices,
# through the codecs module's incremental decoder (which copies each), cost a fifth more.
_UTF8_SLICE = 256 * 1024
_UTF8_LONGEST = 4  # bytes of one character: a slice at least this long always moves the check on


# JSON's whitespace, which may stand before and after the document.
_JSON_WHITESPACE = b" \t\n\r"
# How much of each end of a file `cut_short` is given; whitespace beyond it leaves the question open.
ENDS_BYTES = 4096


def cut_short(head: bytes, tail: bytes) -> str | None:
    """Why a file whose first and last bytes are `head` and `tail` cannot be a whole document, when
    they show it: it opens an object and does not end with the `}` that closes one (most often a
    write still in progress). None when they do not say. Looked at before anything else about the
    file, so that every path gives such a file the same reason: one that reads only the ends of a
    huge file rather than parse it (indexer.load) and the parse itself. The reason names what is
    certain, since the same ends also come from a file with something after its object."""
    opened = head.lstrip(_JSON_WHITESPACE)[:1] == b"{"
    end = tail.rstrip(_JSON_WHITESPACE)[-1:]
    if opened and end and end != b"}":
        return (
            "invalid JSON: the file does not end with the '}' that closes its object "
            "(cut short or still being written, or something follows the object)"
        )
    return None


def _check_text(data: bytes) -> None:
    if not data or data.isspace():
        raise Unreadable("empty file")
    if data.startswith(b"\xef\xbb\xbf"):
        raise Unreadable("starts with a UTF-8 byte-order mark")
    reason = cut_short(data[:ENDS_BYTES], data[-ENDS_BYTES:])
    if reason is not None:
        raise Unreadable(reason)
    # msgspec does not check UTF-8 inside values it skips, so the whole file is checked here.
    if data.isascii():
        return
    view = memoryview(data)
    start = 0
    while start < len(view):
        end = start + max(_UTF8_SLICE, _UTF8_LONGEST)
        try:
            # Not final: a character cut by the slice's end is left for the next slice.
            _, used = codecs.utf_8_decode(view[start:end], "strict", end >= len(view))
        except UnicodeDecodeError as exc:
            raise Unreadable(f"invalid UTF-8 at byte {start + exc.start}") from None
        start += used


def _decode_document(data: bytes) -> _Document:
    try:
        return _document.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        if "out of range" in str(exc):
            return _decode_document(_without_huge_numbers(data))
        if isinstance(exc, msgspec.ValidationError):
            raise Unreadable("top level is not a JSON object") from None
        raise Unreadable(f"invalid JSON: {_explain(data, exc)}") from None


def _explain(data: bytes, exc: Exception) -> str:
    """msgspec's message, unless it misnames the fault: it reports a lone surrogate as truncation,
    or as a surrogate pair that is invalid or unended."""
    if "truncated" in str(exc) or "surrogate" in str(exc):
        try:
            json.loads(data)
        except (ValueError, RecursionError):
            pass
        else:  # the standard library takes lone surrogates; nothing else it takes is refused above
            return "a string holds a lone UTF-16 surrogate escape (such as \\ud800), which is not text"
    return str(exc)


def _without_huge_numbers(data: bytes) -> bytes:
    """The document re-encoded with numbers beyond the double range as null.

    Such numbers are valid JSON (JavaScript reads them as Infinity) but msgspec refuses to decode
    them, so the rare file holding one takes this slow path through the standard library.
    """

    def reject(name: str) -> None:
        raise Unreadable(f"invalid JSON: {name} is not a JSON value")

    def number(text: str) -> float | None:
        value = float(text)
        return None if math.isinf(value) else value

    try:
        loaded = json.loads(data.decode("utf-8"), parse_constant=reject, parse_float=number)
        return msgspec.json.encode(loaded)
    except (ValueError, UnicodeEncodeError) as exc:  # JSONDecodeError is a ValueError
        raise Unreadable(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise Unreadable("invalid JSON: nested too deeply") from None


@dataclass(slots=True)
class _Walk:
    """The running state of a walk over the messages: what the prefix walked so far amounts to."""

    need_first: bool
    need_newest: bool
    messages: int = 0
    inputs: int = 0
    first_time: int | None = None
    newest_time: int | None = None

    @classmethod
    def fresh(cls, doc: _Document | _WholeDocument) -> _Walk:
        # Message times matter for user inputs, and for the session's own times only as fallbacks:
        # most files carry both, so the other messages' times are left unparsed.
        return cls(parse_time(doc.createdAt) is None, parse_time(doc.updatedAt) is None)

    @classmethod
    def resumed(cls, doc: _Document, cp: Checkpoint) -> _Walk | None:
        first, newest = bool(cp.times_known & FIRST_KNOWN), bool(cp.times_known & NEWEST_KNOWN)
        if (parse_time(doc.createdAt) is None and not first) or (parse_time(doc.updatedAt) is None and not newest):
            return None  # the prefix's times were not computed, and this version needs them
        return cls(first, newest, cp.messages, cp.inputs, cp.first_time, cp.newest_time)

    @property
    def times_known(self) -> int:
        return (FIRST_KNOWN if self.need_first or self.need_newest else 0) | (NEWEST_KNOWN if self.need_newest else 0)

    def snapshot(self) -> _Walk:
        return _Walk(self.need_first, self.need_newest, self.messages, self.inputs, self.first_time, self.newest_time)


def _from_document(
    doc: _Document | _WholeDocument, messages: list[_Message] | list[_Message | None], walk: _Walk
) -> tuple[ParsedSession, _Walk | None]:
    """The session from its header fields and its `messages` (`_decode_messages`), and the walk as it
    stood before the last message (None when there are none)."""
    parsed = ParsedSession()
    parsed.title = doc.title if isinstance(doc.title, str) else None
    parsed.agent = doc.agent if isinstance(doc.agent, str) else None
    created_from = doc.createdFrom
    if isinstance(created_from, dict):
        kind = created_from.get("kind")
        source = created_from.get("sourceSessionId")
        parsed.created_from_kind = kind if isinstance(kind, str) else None
        parsed.created_from_source = source if isinstance(source, str) else None

    before_last: _Walk | None = None
    for index, message in enumerate(messages):
        if index == len(messages) - 1:
            before_last = walk.snapshot()
        walk.messages += 1
        if message is None:
            continue
        text = message_text(message.content) if message.role == "user" else ""
        is_input = bool(text) and not text.isspace()
        if is_input or walk.need_newest or (walk.need_first and walk.first_time is None):
            when = parse_time(message.timestamp if message.createdAt is None else message.createdAt)
            if when is not None:
                if walk.first_time is None:
                    walk.first_time = when
                if walk.newest_time is None or when > walk.newest_time:
                    walk.newest_time = when
            if is_input:
                walk.inputs += 1
                parsed.user_inputs.append(UserInput(message_id(message.id), when, text))

    created = parse_time(doc.createdAt)
    updated = parse_time(doc.updatedAt)
    parsed.status = _status(doc.status, messages[-1] if messages else None)
    parsed.created_at_ms = created if created is not None else walk.first_time
    parsed.updated_at_ms = updated if updated is not None else walk.newest_time
    return parsed, before_last


def _checkpoint(data: bytes, raw: msgspec.Raw, before_last: _Walk, *, at: int | None = None) -> Checkpoint | None:
    """The checkpoint at the start of the last element of `raw`, the messages array of `data`
    (found at byte `at`, or by looking for it). None when it cannot be placed for certain."""
    start = messages_offset(data) if at is None else at
    array = memoryview(raw)
    # startswith compares with memcmp; comparing memoryviews went byte by byte (4 % of a build's parse).
    if start is None or not data.startswith(array, start):
        return None  # not the array msgspec read (a duplicate "messages" key, or numbers re-encoded)
    elements = _raw_list.decode(raw)
    if not elements:
        return None
    end = len(array) - 1  # the closing "]"
    while array[end - 1] in _WHITESPACE:
        end -= 1
    cut = end - len(memoryview(elements[-1]))
    crc = zlib.crc32(array[:cut])
    region = zlib.crc32(array[cut - region_size(cut) : cut])
    w = before_last
    return Checkpoint(cut, crc, w.messages, w.inputs, w.first_time, w.newest_time, w.times_known, region)


# --- where the messages array is, without decoding it ------------------------------------------

_WHITESPACE = b" \t\r\n"
_SPACE = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_SCALAR_END = re.compile(rb"[ \t\r\n,\]}]")
_MESSAGES_KEY = "messages"


class _NotFound(Exception):
    pass


def messages_offset(data: bytes) -> int | None:
    """Where the value of the first top-level "messages" key starts, or None. Only the keys before
    it are scanned (values skipped by a tokenizer, not decoded); msgspec checks the rest."""
    found: list[int] = []

    def on_key(key: str, value_at: int) -> int | None:
        if key == _MESSAGES_KEY:
            found.append(value_at)
            return None
        return _skip_value(data, value_at)

    return found[0] if _scan_keys(data, on_key) and found else None


def _only_messages_at(data: bytes, start: int, length: int) -> bool:
    """Whether the document's one top-level "messages" key has its value at `start` (`length` bytes)."""
    seen: list[int] = []

    def on_key(key: str, value_at: int) -> int | None:
        if key != _MESSAGES_KEY:
            return _skip_value(data, value_at)
        seen.append(value_at)
        return start + length if value_at == start else None

    return _scan_keys(data, on_key) and seen == [start]


def _scan_keys(data: bytes, on_key: Callable[[str, int], int | None]) -> bool:
    """Walk the top-level object's keys: `on_key(key, where its value starts)` answers where the
    value ends, or None to stop. False when the document is not an object this scan can follow."""
    try:
        pos = _space(data, 0)
        if data[pos : pos + 1] != b"{":
            return False
        pos = _space(data, pos + 1)
        while data[pos : pos + 1] != b"}":
            key = _STRING.match(data, pos)
            if key is None:
                return False
            pos = _space(data, key.end())
            if data[pos : pos + 1] != b":":
                return False
            raw = key.group()
            name = _string.decode(raw) if b"\\" in raw else raw[1:-1].decode("utf-8", "replace")
            end = on_key(name, _space(data, pos + 1))
            if end is None:
                return True
            pos = _space(data, end)
            if data[pos : pos + 1] == b",":
                pos = _space(data, pos + 1)
            elif data[pos : pos + 1] != b"}":
                return False
        return True
    except (_NotFound, msgspec.DecodeError):
        return False


def _space(data: bytes, pos: int) -> int:
    return _SPACE.match(data, pos).end()  # type: ignore[union-attr]  # the pattern matches empty


def _skip_value(data: bytes, pos: int) -> int:
    """Where the JSON value starting at `pos` ends (not validated: msgspec does that)."""
    head = data[pos : pos + 1]
    if head == b'"':
        match = _STRING.match(data, pos)
        if match is None:
            raise _NotFound
        return match.end()
    if head in (b"{", b"["):
        depth = 0
        for token in _NESTING.finditer(data, pos):
            byte = data[token.start()]
            if byte == 0x22:  # a string
                continue
            depth += 1 if byte in (0x5B, 0x7B) else -1
            if depth == 0:
                return token.end()
        raise _NotFound
    end = _SCALAR_END.search(data, pos)
    if end is None or end.start() == pos:
        raise _NotFound
    return end.start()


def _decode_messages(raw: msgspec.Raw) -> list[_Message | None]:
    """Messages in order; a non-object element becomes None (it still counts as "the last message")."""
    if _head(raw) != b"[":
        return []
    try:
        return list(_messages.decode(raw))
    except msgspec.ValidationError:
        pass  # some element is not an object: decode one by one
    out: list[_Message | None] = []
    for item in _raw_list.decode(raw):
        if _head(item) == b"{":
            out.append(_message.decode(item))
        else:
            out.append(None)
    return out


def _head(raw: msgspec.Raw) -> bytes:
    """The first byte of a raw JSON value, which tells its type."""
    return bytes(memoryview(raw)[:1])


def _status(value: Any, last: _Message | None) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip().lower()
    if last is not None and last.role == "assistant" and _head(last.ccwebPrompt) == b"{":
        return "waiting"
    return "idle"


def message_text(raw: msgspec.Raw) -> str:
    head = _head(raw)
    if head == b'"':
        return _string.decode(raw)
    if head != b"[":
        return ""
    try:
        # Typed blocks skip what is not text (tool results, images) without building it.
        items: list[Any] = _blocks.decode(raw)
    except msgspec.ValidationError:  # an item that is neither a string nor an object
        items = _any.decode(raw)
    parts: list[str] = []
    for item in items:
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, _Block):
            if item.type == "text" and isinstance(item.text, str):
                parts.append(item.text)
        elif isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
    return "\n".join(parts)


def message_id(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    return None


def js_number(value: float) -> str:
    """A finite float as JavaScript's String(value) prints it (ECMAScript Number::toString)."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + js_number(-value)
    # repr gives the shortest digits that round-trip, as ECMAScript requires.
    mantissa, _, exp = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    point = len(whole) + int(exp or 0) - (len(whole + fraction) - len((whole + fraction).lstrip("0")))
    digits = digits.rstrip("0") or "0"
    k, n = len(digits), point  # value = 0.<digits> x 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    head = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{head}e{'+' if e >= 0 else '-'}{abs(e)}"


# --- times -----------------------------------------------------------------------------------

_ISO_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.](\d+))?)?"
    r"(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)",
    re.ASCII,  # only ASCII digits: "２０２６-11-29T08:00:00Z" is not a time
)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MIN_MS = int((_dt.datetime(1, 1, 1, tzinfo=_dt.UTC) - _EPOCH).total_seconds()) * 1000
_MAX_MS = int((_dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_dt.UTC) - _EPOCH).total_seconds()) * 1000 + 999


def parse_time(value: Any) -> int | None:
    """Epoch milliseconds from an ISO-8601 string with a zone, or from a number of epoch ms."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        ms = math.trunc(value)
        return ms if _MIN_MS <= ms <= _MAX_MS else None
    if isinstance(value, str):
        return _parse_iso(value)
    return None


# What cc-web writes (JavaScript's toISOString), and nothing else: ASCII digits where digits go.
_TO_ISO_STRING = re.compile(r"\d{4}-\d{2}-\d{2}T(?:[01]\d|2[0-3]):\d{2}:\d{2}\.\d{3}Z", re.ASCII)
_ONE_MS = _dt.timedelta(milliseconds=1)


def _parse_iso(text: str) -> int | None:
    # Fast path for toISOString's shape, e.g. 2026-11-29T08:00:00.000Z: the standard library's C
    # parser, a third of the pure-Python path's time (every user input has a time). The pattern
    # leaves it only what both read alike: no week dates, no hour 24 (which newer Pythons take as
    # the next day); a field out of range is a ValueError there and None here, as in the general path.
    if len(text) == 24 and _TO_ISO_STRING.fullmatch(text):
        try:
            return (_dt.datetime.fromisoformat(text) - _EPOCH) // _ONE_MS
        except ValueError:
            return None
    return _parse_iso_general(text)


def _parse_iso_general(text: str) -> int | None:
    match = _ISO_RE.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    if not zulu and (int(off_h) > 23 or int(off_m or 0) > 59):
        return None
    try:
        moment = _dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0))
    except ValueError:
        return None
    seconds = (moment - _EPOCH.replace(tzinfo=None)) // _dt.timedelta(seconds=1)
    offset = 0 if zulu else (1 if sign == "+" else -1) * (int(off_h) * 60 + int(off_m or 0)) * 60
    ms = (seconds - offset) * 1000 + int((fraction or "0")[:3].ljust(3, "0"))
    return ms if _MIN_MS <= ms <= _MAX_MS else None


@functools.lru_cache(maxsize=16384)  # answers format the same few thousand times over and over
def format_time(ms: int | None) -> str | None:
    """Epoch ms as ISO-8601 UTC with milliseconds: 2026-11-29T08:00:00.000Z."""
    if ms is None or not _MIN_MS <= ms <= _MAX_MS:
        return None
    moment = _EPOCH + _dt.timedelta(milliseconds=ms)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )
