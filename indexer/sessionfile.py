"""The cc-web session file format, and nothing else.

This is the one module that knows how a cc-web conversation is stored: which file names are
sessions, what makes a file unreadable, and how its fields map to what the index keeps. When cc-web's
format moves, this is the place to change. Everything here is a pure function of bytes and names.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import msgspec

SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
SUFFIX = ".json"


def is_valid_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and SESSION_ID_RE.fullmatch(value) is not None


def session_id_from_name(name: str) -> str | None:
    """The conversation id a directory entry name stands for, or None if it is not a session name."""
    if not name.endswith(SUFFIX):
        return None
    stem = name[: -len(SUFFIX)]
    return stem if SESSION_ID_RE.fullmatch(stem) else None


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


class _Document(msgspec.Struct):
    title: Any = None
    agent: Any = None
    status: Any = None
    createdAt: Any = None
    updatedAt: Any = None
    createdFrom: Any = None
    messages: msgspec.Raw = msgspec.Raw(b"null")


_document = msgspec.json.Decoder(_Document)
_messages = msgspec.json.Decoder(list[_Message])
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])
_message = msgspec.json.Decoder(_Message)
_blocks = msgspec.json.Decoder(list[str | _Block])
_any = msgspec.json.Decoder()
_string = msgspec.json.Decoder(str)


def parse_session(data: bytes) -> ParsedSession:
    """Parse one session file's bytes. Raises Unreadable with a short reason."""
    if not data or data.isspace():
        raise Unreadable("empty file")
    if data.startswith(b"\xef\xbb\xbf"):
        raise Unreadable("starts with a UTF-8 byte-order mark")
    try:
        # msgspec does not check UTF-8 inside values it skips, so the whole file is checked here.
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        doc = _decode_document(data)
    except RecursionError:
        raise Unreadable("invalid JSON: nested too deeply") from None
    return _from_document(doc)


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
    """msgspec's message, unless it misnames the fault: it reports a lone surrogate as truncation."""
    if "truncated" in str(exc):
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


def _from_document(doc: _Document) -> ParsedSession:
    parsed = ParsedSession()
    parsed.title = doc.title if isinstance(doc.title, str) else None
    parsed.agent = doc.agent if isinstance(doc.agent, str) else None
    created_from = doc.createdFrom
    if isinstance(created_from, dict):
        kind = created_from.get("kind")
        source = created_from.get("sourceSessionId")
        parsed.created_from_kind = kind if isinstance(kind, str) else None
        parsed.created_from_source = source if isinstance(source, str) else None

    messages = _decode_messages(doc.messages)
    created = parse_time(doc.createdAt)
    updated = parse_time(doc.updatedAt)
    # Message times matter for user inputs, and for the session's own times only as fallbacks:
    # most files carry both, so the other messages' times are left unparsed.
    need_first, need_newest = created is None, updated is None
    first_time: int | None = None
    newest_time: int | None = None
    for message in messages:
        if message is None:
            continue
        text = message_text(message.content) if message.role == "user" else ""
        is_input = bool(text) and not text.isspace()
        if is_input or need_newest or (need_first and first_time is None):
            when = parse_time(message.timestamp if message.createdAt is None else message.createdAt)
            if when is not None:
                if first_time is None:
                    first_time = when
                if newest_time is None or when > newest_time:
                    newest_time = when
            if is_input:
                parsed.user_inputs.append(UserInput(message_id(message.id), when, text))

    parsed.status = _status(doc.status, messages[-1] if messages else None)
    parsed.created_at_ms = created if created is not None else first_time
    parsed.updated_at_ms = updated if updated is not None else newest_time
    return parsed


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


_DAY_MS: dict[str, int] = {}


def _parse_iso(text: str) -> int | None:
    # Fast path for what cc-web writes (JavaScript's toISOString): 2026-11-29T08:00:00.000Z.
    if (
        len(text) == 24 and text[23] == "Z" and text[10] == "T" and text[19] == "."
        and text[13] == ":" and text[16] == ":" and text.isascii()
    ):  # fmt: skip
        date = text[:10]
        day = _DAY_MS.get(date)
        if day is None:
            day = _parse_iso_general(date + "T00:00:00.000Z")
            if day is None:
                return None
            if len(_DAY_MS) < 100_000:
                _DAY_MS[date] = day
        clock = text[11:13] + text[14:16] + text[17:19] + text[20:23]
        if not clock.isdigit():
            return None
        hour, minute, second = int(clock[0:2]), int(clock[2:4]), int(clock[4:6])
        if hour > 23 or minute > 59 or second > 59:
            return None
        ms = day + ((hour * 60 + minute) * 60 + second) * 1000 + int(clock[6:9])
        return ms if ms <= _MAX_MS else None
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
