"""Reference implementation (test oracle) of the ccweb-index contract.

Issue #2 ("The session file", "Tool 1", "Tool 2", "Errors") plus docs/decisions.md, written
as plainly as possible with the standard library only (``json``, not msgspec, so that it is
an independent implementation). It rescans the sessions directory on every call and keeps no
state: the "last good version" rule is emulated by the caller passing ``last_good``.

Issue #13 adds pages (`cursor` / `nextCursor`), scope "descendants" and `conversationIds`, as the
tool descriptions and docs/decisions.md ("Pages, trees and lookups") state them. The cursors here are
the reference's own (plain base64 of JSON, naming their query): a cursor is opaque, so tests compare
whether there is one, and follow each implementation's own cursors page by page.

Public API:
    read_session(path, last_good=None) -> dict | None | Unreadable
    list_user_inputs(sessions_dir, args, source, last_good=None) -> (result, is_error)
    list_conversations(sessions_dir, args, source, last_good=None) -> (result, is_error)
    wait_for_conversations(sessions_dir, args, source) -> (result, is_error), for files that do not change
plus the helpers parse_time, format_time, message_text, message_id, clamp, js_number_to_string.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")  # always used with fullmatch
SESSION_NAME_RE = re.compile(r"([A-Za-z0-9_-]{1,128})\.json")  # always used with fullmatch

# msgspec's limit is Python's recursion limit minus the caller's stack depth (measured: a
# top-level array nested 999 deep decodes, 1000 does not). Files nested more than MAX_DEPTH
# levels are unreadable here; depths between MAX_DEPTH and ~1000 are not pinned down by the
# contract, so tests should not generate them.
MAX_DEPTH = 500

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)
MIN_MS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // ONE_MS  # 0001-01-01T00:00:00.000Z
MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - EPOCH) // ONE_MS

TOOL1_LIMIT = (1, 50, 15)  # (minimum, maximum, default)
TOOL1_MAX_CHARS = (1, 1000, 1000)
TOOL2_LIMIT = (1, 100, 20)
MAX_IDS = 100  # conversationIds
MAX_DEPTH_BELOW_SOURCE = 64  # scope "descendants"


class _AnyChangeToken:
    """A `changeToken` (issue 13): opaque to clients, so the contract fixes only that it is a
    non-empty string. It compares equal to any such string (tests/test_waits.py checks what it means)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other != ""

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<any changeToken>"


CHANGE_TOKEN = _AnyChangeToken()


@dataclass(frozen=True)
class Unreadable:
    reason: str


def is_valid_id(value) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


# --------------------------------------------------------------------------- JSON validity


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text):
    # A number beyond the double range is valid JSON; it reads as null (docs/decisions.md).
    value = float(text)
    return None if math.isinf(value) else value


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _depth_and_lone_surrogate(doc) -> tuple[int, bool]:
    """Maximum container nesting (top-level object = 1) and whether any string or key holds a
    lone surrogate (json combines valid \\uD83D\\uDE00 pairs, so any surrogate left is lone)."""
    max_depth, lone = 0, False
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            lone = lone or _SURROGATE_RE.search(value) is not None
        elif isinstance(value, dict):
            max_depth = max(max_depth, depth)
            for key, item in value.items():
                lone = lone or _SURROGATE_RE.search(key) is not None
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            max_depth = max(max_depth, depth)
            stack.extend((item, depth + 1) for item in value)
    return max_depth, lone


def parse_document(data: bytes) -> dict | Unreadable:
    """Strict RFC 8259 parse of a whole file; the top level must be an object."""
    if data.startswith(b"\xef\xbb\xbf"):
        return Unreadable("starts with a byte-order mark")
    try:
        text = data.decode("utf-8")  # strict: rejects invalid bytes and encoded surrogates
    except UnicodeDecodeError as exc:
        return Unreadable(f"not UTF-8: {exc}")
    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        return Unreadable("nested too deeply")
    except ValueError as exc:  # JSONDecodeError, our hooks, integers over 4300 digits
        return Unreadable(f"not valid JSON: {exc}")
    if not isinstance(doc, dict):
        return Unreadable("top level is not an object")
    depth, lone = _depth_and_lone_surrogate(doc)
    if depth > MAX_DEPTH:
        return Unreadable("nested too deeply")
    if lone:
        return Unreadable("lone surrogate in a string")
    return doc


# --------------------------------------------------------------------------- times

_TIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2})"
    r"(?::([0-9]{2})(?:\.([0-9]+))?)?"
    r"(?:([Zz])|([+-])([0-9]{2})(?::?([0-9]{2}))?)"
)


def _days_since_epoch(year: int, month: int, day: int) -> int:
    """Proleptic Gregorian; raises ValueError for an invalid date. Year 0 goes through the
    400-year cycle (146097 days) because datetime.date starts at year 1."""
    if year == 0:
        return _days_since_epoch(400, month, day) - 146097
    return (date(year, month, day) - date(1970, 1, 1)).days


def _parse_time_string(text: str) -> int | None:
    m = _TIME_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute = (int(g) for g in m.group(1, 2, 3, 4, 5))
    second = int(m.group(6) or 0)
    millis = int((m.group(7) or "").ljust(3, "0")[:3])  # fraction truncated to ms
    if hour > 23 or minute > 59 or second > 59:
        return None
    if m.group(8):  # Z
        offset_minutes = 0
    else:
        off_h, off_m = int(m.group(10)), int(m.group(11) or 0)
        if off_h > 23 or off_m > 59:  # decisions.md does not bound offsets; this is our choice
            return None
        offset_minutes = (off_h * 60 + off_m) * (1 if m.group(9) == "+" else -1)
    try:
        days = _days_since_epoch(year, month, day)
    except ValueError:
        return None
    local_ms = days * 86_400_000 + ((hour * 60 + minute) * 60 + second) * 1000 + millis
    return local_ms - offset_minutes * 60_000


def parse_time(value) -> int | None:
    """A cc-web time → epoch milliseconds (UTC), or None when absent/unparseable/out of range."""
    if isinstance(value, bool):
        ms = None
    elif isinstance(value, int):
        ms = value
    elif isinstance(value, float):
        ms = math.trunc(value)  # toward zero, as JavaScript
    elif isinstance(value, str):
        ms = _parse_time_string(value)
    else:
        ms = None
    if ms is None or not MIN_MS <= ms <= MAX_MS:
        return None
    return ms


def format_time(ms: int | None) -> str | None:
    if ms is None:
        return None
    t = EPOCH + timedelta(milliseconds=ms)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{t.microsecond // 1000:03d}Z"
    )


# --------------------------------------------------------------------------- messages


def js_number_to_string(x: float) -> str:
    """ECMAScript Number::toString for a finite double (Python's repr gives the same shortest
    round-trip digits)."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_number_to_string(-x)
    _, digit_tuple, exponent = Decimal(repr(x)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)
    k = len(digits)
    n = exponent + k  # x = 0.<digits> * 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def message_id(value) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number_to_string(value)
    return None


def message_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, str):
                parts.append(item)
            elif (
                isinstance(item, dict)
                and item.get("type") == "text"
                and isinstance(item.get("text"), str)
            ):
                parts.append(item["text"])
        return "\n".join(parts)
    return ""


def message_time(message: dict) -> int | None:
    value = message.get("createdAt")
    if value is None:  # absent or null; a present unparseable createdAt does not fall back
        value = message.get("timestamp")
    return parse_time(value)


def is_user_input(message) -> bool:
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    text = message_text(message.get("content"))
    return text != "" and not text.isspace()


# --------------------------------------------------------------------------- sessions


def _str_or_none(value):
    return value if isinstance(value, str) else None


def session_facts(doc: dict, conversation_id: str, mtime_ms: int) -> dict:
    """Everything both tools need from one readable session document."""
    messages = doc.get("messages")
    if not isinstance(messages, list):
        messages = []
    created_from = doc.get("createdFrom")
    if not isinstance(created_from, dict):
        created_from = {}

    inputs = [
        {
            "messageId": message_id(m.get("id")),
            "createdAt": format_time(message_time(m)),
            "content": message_text(m.get("content")),
        }
        for m in messages
        if is_user_input(m)
    ]

    raw_status = doc.get("status")
    last = messages[-1] if messages else None
    if isinstance(raw_status, str) and raw_status.strip():
        status = raw_status.strip().lower()
    elif (
        isinstance(last, dict)
        and last.get("role") == "assistant"
        and isinstance(last.get("ccwebPrompt"), dict)
    ):
        status = "waiting"
    else:
        status = "idle"

    times = [message_time(m) for m in messages if isinstance(m, dict)]
    parsed_times = [t for t in times if t is not None]

    created_ms = parse_time(doc.get("createdAt"))
    if created_ms is None and parsed_times:
        created_ms = parsed_times[0]  # first message, in array order, whose time parses
    updated_ms = parse_time(doc.get("updatedAt"))
    if updated_ms is None and parsed_times:
        updated_ms = max(parsed_times)
    if updated_ms is None:
        updated_ms = mtime_ms

    return {
        "conversationId": conversation_id,
        "title": _str_or_none(doc.get("title")),
        "agent": _str_or_none(doc.get("agent")),
        "status": status,
        "createdAtMs": created_ms,
        "updatedAtMs": updated_ms,
        "createdFromKind": _str_or_none(created_from.get("kind")),
        "sourceSessionId": _str_or_none(created_from.get("sourceSessionId")),
        "inputs": inputs,
    }


def read_session(path: str | os.PathLike, last_good: bytes | tuple[bytes, int] | None = None) -> dict | None | Unreadable:
    """None: not a session. Unreadable(reason): unreadable (and no usable last_good bytes).
    Otherwise the facts dict of session_facts. last_good: bytes of the last readable version,
    parsed instead when the current file is unreadable (the current mtime is still used)."""
    name = os.path.basename(os.fspath(path))
    m = SESSION_NAME_RE.fullmatch(name)
    if m is None:
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    mtime_ms = st.st_mtime_ns // 1_000_000
    try:
        with open(path, "rb") as f:
            doc = parse_document(f.read())
    except OSError as exc:
        doc = Unreadable(f"cannot read: {exc}")
    if isinstance(doc, Unreadable) and last_good is not None:
        # The last good version stands in whole, with the mtime it had (its updatedAt fallback).
        good_bytes, good_mtime_ms = last_good if isinstance(last_good, tuple) else (last_good, mtime_ms)
        previous = parse_document(good_bytes)
        if not isinstance(previous, Unreadable):
            doc, mtime_ms = previous, good_mtime_ms
    if isinstance(doc, Unreadable):
        return doc
    return session_facts(doc, m.group(1), mtime_ms)


# --------------------------------------------------------------------------- tools


def clamp(value, minimum: int, maximum: int, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, float):
        if math.isnan(value):  # cannot arrive through strict JSON; unspecified
            return default
        if math.isinf(value):
            return maximum if value > 0 else minimum
        value = math.trunc(value)
    return max(minimum, min(maximum, value))


def _error(code: str, message: str) -> tuple[dict, bool]:
    return {"error": {"code": code, "message": message}}, True


def _cursor_for(query, position) -> str:
    return base64.urlsafe_b64encode(json.dumps({"query": query, "position": position}).encode()).decode()


def _cursor_position(args: dict, query):
    """(position or None, error or None): no cursor is null or ""; any other cursor must be one of
    this query's own."""
    value = args.get("cursor")
    if value is None or value == "":
        return None, None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(value.encode("ascii")))
        if decoded["query"] == json.loads(json.dumps(query)):
            return decoded["position"], None
    except Exception:
        pass
    return None, _error("invalid_cursor", "not a cursor of this query")


def list_user_inputs(sessions_dir, args: dict, source: str | None,
                     last_good: dict[str, bytes] | None = None) -> tuple[dict, bool]:
    conversation_id = args.get("conversationId")
    if conversation_id is None:
        if not is_valid_id(source):
            return _error("missing_source_conversation", "no conversationId and no source")
        conversation_id = source
    elif not is_valid_id(conversation_id):
        return _error("invalid_conversation_id", "conversationId is not a valid id")

    limit = clamp(args.get("limit"), *TOOL1_LIMIT)
    max_chars = clamp(args.get("maxChars"), *TOOL1_MAX_CHARS)
    query = ["inputs", conversation_id]
    position, error = _cursor_position(args, query)
    if error:
        return error

    path = os.path.join(sessions_dir, conversation_id + ".json")
    facts = read_session(path, (last_good or {}).get(conversation_id))
    if facts is None:
        return _error("conversation_not_found", "no such conversation")
    if isinstance(facts, Unreadable):
        return _error("conversation_unreadable", facts.reason)

    all_inputs = facts["inputs"]  # oldest first: an input's place here is its position
    # The page starts with the newest input, or with the one the cursor names, if it is still there.
    start = len(all_inputs) - 1
    if position is not None:
        start, identity = position
        if start >= 0 and (start >= len(all_inputs) or identity != _identity(all_inputs[start])):
            return _error("invalid_cursor", "the conversation's inputs were rewritten")
    recent = all_inputs[max(0, start - limit + 1): start + 1]
    chosen = []  # newest first
    remaining = max_chars
    older = start - len(recent)  # the newest input older than this page's window
    next_position = older if recent and older >= 0 else None  # the newest input not returned whole
    for n, item in enumerate(reversed(recent)):
        text = item["content"]
        if len(text) <= remaining:
            chosen.append({**item, "contentChars": len(text), "originalChars": len(text),
                           "truncated": False})
            remaining -= len(text)
        else:
            if remaining > 0:
                cut = text[:remaining]
                chosen.append({**item, "content": cut, "contentChars": len(cut),
                               "originalChars": len(text), "truncated": True})
            # Cut as the first of its page, it never fits: the next page moves past it.
            next_position = start - n - (1 if n == 0 else 0)
            break
    chosen.reverse()

    inputs = [
        {key: item[key] for key in
         ("messageId", "createdAt", "content", "contentChars", "originalChars", "truncated")}
        for item in chosen
    ]
    next_cursor = None
    if next_position is not None:
        identity = _identity(all_inputs[next_position]) if next_position >= 0 else None
        next_cursor = _cursor_for(query, [next_position, identity])
    return {
        "conversationId": conversation_id,
        "limit": limit,
        "maxChars": max_chars,
        "totalChars": sum(item["contentChars"] for item in inputs),
        "returnedCount": len(inputs),
        "hasMore": next_cursor is not None,
        "nextCursor": next_cursor,
        "inputs": inputs,
    }, False


def _identity(item: dict) -> list:
    return [item["messageId"], item["createdAt"]]


def _filter_value(value) -> str | None:
    """A non-empty string filter, or None for "no filter"."""
    return value if isinstance(value, str) and value != "" else None


def _wanted_ids(value):
    """(ids or None, error or None) from conversationIds."""
    if value is None:
        return None, None
    if not isinstance(value, list):
        return None, _error("invalid_conversation_id", "conversationIds is not an array")
    if len(value) > MAX_IDS:
        return None, _error("too_many_conversation_ids", "more than 100 ids")
    if not all(is_valid_id(item) for item in value):
        return None, _error("invalid_conversation_id", "conversationIds holds an invalid id")
    return sorted(set(value)), None


def _tree(sessions: dict[str, dict], source: str) -> dict[str, int]:
    """Breadth first from the source over MCP createdFrom edges: each conversation once, at its
    smallest depth, no deeper than MAX_DEPTH_BELOW_SOURCE."""
    depth_of: dict[str, int] = {}
    frontier = [source]
    for depth in range(1, MAX_DEPTH_BELOW_SOURCE + 1):
        frontier = [
            f["conversationId"] for f in sessions.values()
            if f["createdFromKind"] == "mcp" and f["sourceSessionId"] in frontier
            and f["conversationId"] not in depth_of
        ]
        for conversation_id in frontier:
            depth_of[conversation_id] = depth
    return depth_of


def list_conversations(sessions_dir, args: dict, source: str | None,
                       last_good: dict[str, bytes] | None = None) -> tuple[dict, bool]:
    scope = args.get("scope") if args.get("scope") in ("children", "descendants") else "all"
    source_id = source if is_valid_id(source) else None
    if scope != "all" and source_id is None:
        return _error("missing_source_conversation", f"scope {scope} needs a source")
    limit = clamp(args.get("limit"), *TOOL2_LIMIT)
    agent_filter = _filter_value(args.get("agent"))
    status_filter = _filter_value(args.get("status"))
    ids, error = _wanted_ids(args.get("conversationIds"))
    if error:
        return error
    query = ["conversations", scope, source_id, agent_filter and agent_filter.lower(),
             status_filter and status_filter.lower(), ids]
    after, error = _cursor_position(args, query)
    if error:
        return error

    readable = {}
    for name in os.listdir(sessions_dir):
        m = SESSION_NAME_RE.fullmatch(name)
        if m is None:
            continue
        facts = read_session(os.path.join(sessions_dir, name), (last_good or {}).get(m.group(1)))
        if facts is not None and not isinstance(facts, Unreadable):
            readable[facts["conversationId"]] = facts
    depth_of = _tree(readable, source_id) if scope == "descendants" else {}

    rows = []
    for facts in readable.values():
        if scope == "children" and not (
            facts["createdFromKind"] == "mcp" and facts["sourceSessionId"] == source_id
        ):
            continue
        if scope == "descendants" and facts["conversationId"] not in depth_of:
            continue
        if ids is not None and facts["conversationId"] not in ids:
            continue
        if agent_filter is not None and (
            facts["agent"] is None or facts["agent"].lower() != agent_filter.lower()
        ):
            continue
        if status_filter is not None and facts["status"].lower() != status_filter.lower():
            continue
        if after is not None and (-facts["updatedAtMs"], facts["conversationId"]) <= (-after[0], after[1]):
            continue  # on an earlier page
        rows.append(facts)

    rows.sort(key=lambda f: (-f["updatedAtMs"], f["conversationId"]))
    conversations = []
    for f in rows[:limit]:
        row = {
            "conversationId": f["conversationId"],
            "title": f["title"],
            "agent": f["agent"],
            "status": f["status"],
            "createdAt": format_time(f["createdAtMs"]),
            "updatedAt": format_time(f["updatedAtMs"]),
            "createdFromKind": f["createdFromKind"],
            "parentConversationId": f["sourceSessionId"] if f["createdFromKind"] == "mcp" else None,
            "userInputCount": len(f["inputs"]),
        }
        if scope == "descendants":
            row["depth"] = depth_of[f["conversationId"]]
        conversations.append(row)
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = _cursor_for(query, [last["updatedAtMs"], last["conversationId"]])
    return {
        "scope": scope,
        "sourceConversationId": source_id,
        "limit": limit,
        "returnedCount": len(conversations),
        "hasMore": next_cursor is not None,
        "nextCursor": next_cursor,
        "conversations": conversations,
        "changeToken": CHANGE_TOKEN,
    }, False


_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]+")


def wait_for_conversations(sessions_dir, args: dict, source: str | None) -> tuple[dict, bool]:
    """Issue 13's wait, for a sessions directory that does not change during the call and a `since`
    that is absent or plainly not a token: the list answer, nothing changed, timed out. (A token is
    opaque: what a real one means is checked through the server, tests/test_waits.py.)"""
    since = args.get("since")
    if since is not None:
        if isinstance(since, str) and _TOKEN_CHARS.fullmatch(since):
            raise ValueError("the reference cannot judge a token; pass none, or one that is plainly not a token")
        return _error("invalid_change_token", "since is not a changeToken")
    # A wait takes no page cursor: it watches the whole selection.
    listed, is_error = list_conversations(sessions_dir, {k: v for k, v in args.items() if k != "cursor"}, source)
    if is_error:
        return listed, True
    return {**listed, "changed": [], "timedOut": True, "tokenReset": False}, False
