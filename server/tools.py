"""The tools' contracts: names, schemas, descriptions, requests parsed leniently, answer shapes.

Pure functions only: no files, no database. `server.service` parses each request here, and the
answers (`server.from_index`, `server.from_files`) are shaped here from what they found.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from ccweb_index.indexer.row import SessionRow
from ccweb_index.indexer.sessionfile import format_time, is_valid_id
from ccweb_index.indexer.stored import STORED_INPUT_CHARS
from ccweb_index.indexer.tree import DESCENDANTS_MAX_DEPTH
from ccweb_index.server import cursor

LIST_USER_INPUTS = "ccweb_list_user_inputs"
LIST_CONVERSATIONS = "ccweb_list_conversations"
WAIT_FOR_CONVERSATIONS = "ccweb_wait_for_conversations"

INPUTS_LIMIT = (1, 50, 15)  # minimum, maximum, default
# The index keeps no more of an input than the largest budget (indexer.stored); the default is all of it.
INPUTS_MAX_CHARS = (1, STORED_INPUT_CHARS, STORED_INPUT_CHARS)
CONVERSATIONS_LIMIT = (1, 100, 20)
# Seconds. The default fits Codex's default tool time-out of 60 s (README: raising a client's).
WAIT_TIMEOUT = (0, 300, 30)
# Waits open at once in one server (`serve --max-waits`); beyond it a wait is refused, not queued.
DEFAULT_MAX_WAITS = 256
SCOPES = ("all", "children", "descendants")
# How many ids one conversationIds lookup takes: as many as the largest page.
MAX_CONVERSATION_IDS = CONVERSATIONS_LIMIT[1]


class ToolError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def payload(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


# --- argument leniency ---------------------------------------------------------------------


def clamp_int(value: object, bounds: tuple[int, int, int]) -> int:
    """A number is truncated then clamped; anything else (bool, string, null, missing) is the default."""
    low, high, default = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, float):
        if math.isnan(value):
            return default
        if math.isinf(value):
            return high if value > 0 else low
        value = math.trunc(value)
    return min(max(value, low), high)


def filter_key(value: Any) -> str | None:
    """An agent/status filter: a non-empty string, compared case-insensitively; else no filter."""
    return value.lower() if isinstance(value, str) and value else None


def valid_source(source: str | None) -> str | None:
    return source if is_valid_id(source) else None


_SOURCE_SETTINGS = (
    "it comes from CCWEB_SOURCE_SESSION_ID or --source-session for stdio, and from the "
    "X-Ccweb-Source-Session header over HTTP; it is unset or not a valid id"
)


def requested_conversation(arguments: dict[str, Any], source: str | None) -> str:
    """The conversation whose inputs are wanted: an explicit id, else the caller's own conversation."""
    value = arguments.get("conversationId")
    if value is not None:
        if not is_valid_id(value):
            raise ToolError(
                "invalid_conversation_id",
                "conversationId must be a conversation id: 1 to 128 characters from A-Z, a-z, 0-9, '_' "
                "and '-'. Omit it to read the inputs of the conversation you are running in.",
            )
        return value
    own = valid_source(source)
    if own is None:
        raise ToolError(
            "missing_source_conversation",
            "No conversationId was given and this server was not told which conversation you are running "
            f"in ({_SOURCE_SETTINGS}). Pass conversationId explicitly.",
        )
    return own


def not_found(conversation_id: str) -> ToolError:
    return ToolError(
        "conversation_not_found",
        f"There is no conversation {conversation_id!r} in the sessions directory. "
        "Check the id, e.g. with ccweb_list_conversations.",
    )


def unreadable(conversation_id: str, reason: str, *, for_now: bool = False) -> ToolError:
    """`for_now`: the failure is this server's environment (out of descriptors or memory, an I/O
    error), not the file's state, so waiting for cc-web is not the advice."""
    then = (
        "The file is not at fault: this server could not read it just now. Try again in a moment."
        if for_now
        else "Try again once cc-web has finished writing it."
    )
    return ToolError(
        "conversation_unreadable",
        f"The session file of conversation {conversation_id!r} cannot be read ({reason}) and no earlier "
        f"readable version is indexed. {then}",
    )


def unknown_tool(name: object) -> ToolError:
    shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else f"{name[:80]!r}... ({len(name)} characters)"
    return ToolError(
        "unknown_tool",
        f"There is no tool {shown}; the tools are {LIST_USER_INPUTS}, {LIST_CONVERSATIONS} and {WAIT_FOR_CONVERSATIONS}.",
    )


def too_many_waits(cap: int) -> ToolError:
    return ToolError(
        "too_many_waits",
        f"This server already has {cap} waits open, its cap (serve --max-waits). Try again in a while, or "
        "call ccweb_list_conversations instead.",
    )


def missing_source_for_scope(scope: str) -> ToolError:
    return ToolError(
        "missing_source_conversation",
        f'scope "{scope}" lists the conversations created by the conversation you are running in, '
        f"but this server was not told which conversation you are running in ({_SOURCE_SETTINGS}). "
        'Use scope "all" instead.',
    )


def invalid_cursor(tool: str) -> ToolError:
    return ToolError(
        "invalid_cursor",
        f"This cursor was not made by {tool} for these arguments, or it was altered. A cursor only "
        "continues the query that returned it (the same tool, conversation, scope, source, filters and "
        "conversationIds; limit and maxChars may change): pass nextCursor back exactly as it was "
        "returned, or call again without cursor to start from the first page.",
    )


def answer_too_large(size: int, limit: int) -> ToolError:
    return ToolError(
        "answer_too_large",
        f"This answer would be a message of about {size / 2**20:.1f} MiB, more than MCP clients take (at "
        f"most {limit / 2**20:g} MiB: the TypeScript SDK's stdio transport drops the connection beyond "
        "10 MiB). Some conversation here has very long metadata (a title, agent, status or message "
        "id): call again with a smaller limit, and page with the cursor. If one conversation alone is "
        "that large, narrow the selection (scope, agent, status or conversationIds) to leave it out.",
    )


def history_changed(conversation_id: str) -> ToolError:
    return ToolError(
        "invalid_cursor",
        f"The inputs of conversation {conversation_id!r} were rewritten since this cursor was made: the "
        "input it continues from is no longer where it was. Call again without cursor to start from "
        "the newest input.",
    )


# --- the two requests, validated -------------------------------------------------------------


class InputPosition(NamedTuple):
    """Where a page of inputs starts: the newest input not yet returned whole, by its place among the
    conversation's inputs (oldest 0; -1: none is left) and, to tell that it is still the same input,
    its messageId (as `message_key`) and createdAt."""

    seq: int
    message_key: str | None
    created_at_ms: int | None


def message_key(message_id: str | None) -> str | None:
    """What a cursor keeps of a messageId: a digest, because an id may be of any length and a cursor
    longer than cursor.MAX_CURSOR_CHARS is refused."""
    if message_id is None:
        return None
    return hashlib.blake2b(message_id.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class InputsRequest:
    conversation_id: str
    limit: int
    max_chars: int
    start: InputPosition | None = None  # from the cursor; None: the newest input

    @property
    def query(self) -> tuple[object, ...]:
        """What a cursor is bound to (limit and maxChars may change from page to page)."""
        return (LIST_USER_INPUTS, self.conversation_id)


@dataclass(frozen=True, slots=True)
class ConversationsRequest:
    scope: str  # one of SCOPES
    source: str | None  # the caller's conversation, when valid
    limit: int
    agent_key: str | None
    status_key: str | None
    ids: tuple[str, ...] | None = None  # conversationIds, sorted and unique; None: any conversation
    after: tuple[int, str] | None = None  # from the cursor: the sort key (updated_at_ms, id) of the last row shown

    @property
    def query(self) -> tuple[object, ...]:
        return (LIST_CONVERSATIONS, self.scope, self.source, self.agent_key, self.status_key, self.ids)


@dataclass(frozen=True, slots=True)
class ChangePosition:
    """A point in an index's change sequence: what a `changeToken` stands for."""

    index_id: str  # 16 hex digits, made when the index was created; a rebuilt index has another
    seq: int  # the number of the last change the answer reflects (0: none yet)


# Where no index could be read: a token for it makes the next wait report everything as changed.
UNKNOWN_POSITION = ChangePosition("0" * 16, 0)


@dataclass(frozen=True, slots=True)
class WaitRequest:
    selection: ConversationsRequest  # the conversations watched, as ccweb_list_conversations selects them
    since: ChangePosition | None  # None: changes after the call began
    timeout_seconds: float


def inputs_request(arguments: dict[str, Any], source: str | None) -> InputsRequest:
    request = InputsRequest(
        requested_conversation(arguments, source),
        clamp_int(arguments.get("limit"), INPUTS_LIMIT),
        clamp_int(arguments.get("maxChars"), INPUTS_MAX_CHARS),
    )
    position = _position(request.query, arguments)
    if position is None:
        return request
    match position:
        case ["i", int(seq), str() | None as key, int() | None as created_at_ms] if (
            seq >= -1 and _storable(seq) and (created_at_ms is None or _storable(created_at_ms))
        ):
            start = InputPosition(seq, key, created_at_ms)
        case _:
            raise invalid_cursor(LIST_USER_INPUTS)
    return InputsRequest(request.conversation_id, request.limit, request.max_chars, start)


def conversations_request(arguments: dict[str, Any], source: str | None) -> ConversationsRequest:
    source = valid_source(source)
    scope = arguments.get("scope")
    if scope not in SCOPES:
        scope = "all"
    if scope != "all" and source is None:
        raise missing_source_for_scope(scope)
    request = ConversationsRequest(
        scope,
        source,
        clamp_int(arguments.get("limit"), CONVERSATIONS_LIMIT),
        filter_key(arguments.get("agent")),
        filter_key(arguments.get("status")),
        requested_ids(arguments.get("conversationIds")),
    )
    position = _position(request.query, arguments)
    if position is None:
        return request
    match position:
        case ["c", int(updated_at_ms), str(last_id)] if _storable(updated_at_ms) and is_valid_id(last_id):
            after = (updated_at_ms, last_id)
        case _:
            raise invalid_cursor(LIST_CONVERSATIONS)
    return ConversationsRequest(
        request.scope, request.source, request.limit, request.agent_key, request.status_key, request.ids, after
    )


def requested_ids(value: object) -> tuple[str, ...] | None:
    """conversationIds: absent or null is any conversation; else up to MAX_CONVERSATION_IDS valid ids."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ToolError(
            "invalid_conversation_id",
            f"conversationIds must be an array of up to {MAX_CONVERSATION_IDS} conversation ids. "
            "Omit it to list conversations whatever their id.",
        )
    if len(value) > MAX_CONVERSATION_IDS:
        raise ToolError(
            "too_many_conversation_ids",
            f"conversationIds holds {len(value)} ids; one call takes at most {MAX_CONVERSATION_IDS}. "
            "Split them over several calls.",
        )
    for item in value:
        if not is_valid_id(item):
            shown = repr(item) if not isinstance(item, str) or len(item) <= 80 else f"{item[:80]!r}..."
            raise ToolError(
                "invalid_conversation_id",
                f"conversationIds holds {shown}, which is not a conversation id: ids are 1 to 128 "
                "characters from A-Z, a-z, 0-9, '_' and '-'.",
            )
    return tuple(sorted(set(value)))


# What SQLite can bind as an INTEGER: a cursor has no secret, so a forged one may name any number, and
# one beyond this would fail inside the index instead of as the caller's mistake.
_SQLITE_INTEGERS = range(-(2**63), 2**63)


def _storable(value: int) -> bool:
    return not isinstance(value, bool) and value in _SQLITE_INTEGERS


def _position(query: tuple[object, ...], arguments: dict[str, Any]) -> list[Any] | None:
    """The position in `cursor`, checked against the query; None without a cursor."""
    value = arguments.get("cursor")
    if value is None or value == "":  # as filters: the empty string means "none"
        return None
    tool = str(query[0])
    if not isinstance(value, str):
        raise invalid_cursor(tool)
    try:
        return cursor.decode(query, value)
    except cursor.BadCursor:
        raise invalid_cursor(tool) from None


def wait_request(arguments: dict[str, Any], source: str | None) -> WaitRequest:
    """The selection is exactly ccweb_list_conversations's (`conversations_request`), so whatever
    that tool learns to select, the wait watches too."""
    # A wait watches a whole selection: it takes no page cursor (its answer's nextCursor is for the list).
    selection = {name: value for name, value in arguments.items() if name != "cursor"}
    return WaitRequest(
        conversations_request(selection, source),
        decode_change_token(arguments.get("since")),
        clamp_seconds(arguments.get("timeoutSeconds"), WAIT_TIMEOUT),
    )


def clamp_seconds(value: object, bounds: tuple[int, int, int]) -> float:
    """`clamp_int`, keeping fractions: a number clamped; anything else the default."""
    low, high, default = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return float(default)
    return float(min(max(value, low), high))


# --- change tokens: opaque to clients, checked here ------------------------------------------

_TOKEN_CHECK_BYTES = 4


def _token_check(body: bytes) -> bytes:
    return hashlib.sha256(b"ccweb-index change token\0" + body).digest()[:_TOKEN_CHECK_BYTES]


@functools.lru_cache(maxsize=64)  # the same few positions, from call to call, while nothing changes
def encode_change_token(position: ChangePosition) -> str:
    body = bytes.fromhex(position.index_id) + position.seq.to_bytes(8, "big")
    return base64.urlsafe_b64encode(body + _token_check(body)).decode("ascii").rstrip("=")


def decode_change_token(value: object) -> ChangePosition | None:
    """None when absent (or null); else the position, or `invalid_change_token`."""
    if value is None:
        return None
    raw = cursor.unpadded_b64(value) if isinstance(value, str) and 0 < len(value) <= 64 else None
    if (
        raw is None
        or len(raw) != 8 + 8 + _TOKEN_CHECK_BYTES
        or _token_check(raw[:16]) != raw[16:]
        or not _storable(int.from_bytes(raw[8:16], "big"))  # no secret: it can be forged
    ):
        raise ToolError(
            "invalid_change_token",
            "since must be a changeToken exactly as an answer of ccweb_list_conversations or "
            f"{WAIT_FOR_CONVERSATIONS} returned it. Call ccweb_list_conversations to get a fresh one, or "
            "omit since to wait for changes from now on.",
        )
    return ChangePosition(raw[:8].hex(), int.from_bytes(raw[8:16], "big"))


# --- answers ---------------------------------------------------------------------------------


class StoredInput(NamedTuple):
    """An input as the index (or the files) gives it. A tuple: a frozen dataclass's __init__ costs
    a call of object.__setattr__ per field, for each of a page's rows, at every call."""

    seq: int  # its place among the conversation's inputs, oldest 0
    message_id: str | None
    created_at_ms: int | None
    content: str  # the input's head: at least as many code points as any budget (indexer.stored)
    original_chars: int  # the whole input's length in code points


def user_inputs_answer(request: InputsRequest, newest_first: list[StoredInput]) -> dict[str, Any]:
    """`newest_first`: up to `limit` + 1 inputs from where the page starts (`request.start`, else the
    newest). Spend `max_chars` code points from the newest input back; return what fits, oldest first."""
    if request.start is not None and request.start.seq >= 0 and not _same_input(request.start, newest_first):
        raise history_changed(request.conversation_id)
    remaining = request.max_chars
    chosen: list[dict[str, Any]] = []
    following = newest_first[request.limit] if len(newest_first) > request.limit else None
    next_seq = None if following is None else following.seq  # the newest input not returned whole
    for index, item in enumerate(newest_first[: request.limit]):
        length = item.original_chars
        if length <= remaining:
            chosen.append(_input(item, item.content, length, False))
            remaining -= length
            continue
        if remaining > 0:
            chosen.append(_input(item, item.content[:remaining], length, True))
        # A cut input is returned again, whole if it can be, on the next page; unless it was this
        # page's first: then no page of this budget holds it, and the next one moves past it.
        next_seq = item.seq - 1 if index == 0 else item.seq
        break
    chosen.reverse()
    next_cursor = None
    if next_seq is not None:
        anchor = next((item for item in newest_first if item.seq == next_seq), None)
        identity = [None, None] if anchor is None else [message_key(anchor.message_id), anchor.created_at_ms]
        position = ["i", next_seq, *identity]
        next_cursor = cursor.encode(request.query, position)
    return {
        "conversationId": request.conversation_id,
        "limit": request.limit,
        "maxChars": request.max_chars,
        "totalChars": sum(entry["contentChars"] for entry in chosen),
        "returnedCount": len(chosen),
        "hasMore": next_cursor is not None,
        "nextCursor": next_cursor,
        "inputs": chosen,
    }


def _same_input(start: InputPosition, newest_first: list[StoredInput]) -> bool:
    if not newest_first:
        return False
    first = newest_first[0]
    return (first.seq, message_key(first.message_id), first.created_at_ms) == start


def _input(item: StoredInput, content: str, original: int, truncated: bool) -> dict[str, Any]:
    return {
        "messageId": item.message_id,
        "createdAt": format_time(item.created_at_ms),
        "content": content,
        "contentChars": len(content),
        "originalChars": original,
        "truncated": truncated,
    }


class Listed(NamedTuple):
    """A session in a conversations answer, with its depth below the source in scope "descendants"."""

    row: SessionRow
    depth: int | None = None


def conversations_answer(request: ConversationsRequest, listed: list[Listed], position: ChangePosition) -> dict[str, Any]:
    """`listed`: the matching sessions in answer order, up to one more than the limit (to tell hasMore).
    `position`: read before the rows, so every change after it is reported by a wait given the token."""
    page = listed[: request.limit]
    next_cursor = None
    if len(listed) > request.limit:
        last = page[-1].row
        next_cursor = cursor.encode(request.query, ["c", last.updated_at_ms, last.id])
    return {
        "scope": request.scope,
        "sourceConversationId": request.source,
        "limit": request.limit,
        "returnedCount": len(page),
        "hasMore": next_cursor is not None,
        "nextCursor": next_cursor,
        "changeToken": encode_change_token(position),
        "conversations": [conversation_row(item) for item in page],  # last: see `wait_answer`
    }


@dataclass(frozen=True, slots=True)
class Changed:
    conversation_id: str
    deleted: bool  # its file is gone: it is in no list any more


def wait_answer(listed: dict[str, Any], changed: list[Changed], *, timed_out: bool, reset: bool) -> dict[str, Any]:
    """A wait's answer: the list answer (with its changeToken) and what changed since `since`.
    `reset`: `since` was made by another index (or one since rebuilt) or is older than the change
    log keeps, so what changed is unknown: every listed conversation is reported changed."""
    if reset:
        changed = [Changed(row["conversationId"], False) for row in listed["conversations"]]
    # The rows go last, after every other field: Claude Code shows a model only the first 2 KB of an
    # answer over about 50,000 characters (docs/decisions.md), and what changed and the next token
    # are what a waiting agent must not lose.
    head = {key: value for key, value in listed.items() if key != "conversations"}
    return {
        **head,
        "changed": [{"conversationId": item.conversation_id, "deleted": item.deleted} for item in changed],
        "timedOut": timed_out,
        "tokenReset": reset,
        "conversations": listed["conversations"],
    }


def conversation_row(item: Listed) -> dict[str, Any]:
    row = item.row
    out = {
        "conversationId": row.id,
        "title": row.title,
        "agent": row.agent,
        "status": row.status,
        "createdAt": format_time(row.created_at_ms),
        "updatedAt": format_time(row.updated_at_ms),
        "createdFromKind": row.created_from_kind,
        "parentConversationId": row.created_from_source if row.created_from_kind == "mcp" else None,
        "userInputCount": row.user_input_count,
    }
    if item.depth is not None:
        out["depth"] = item.depth
    return out


# --- what tools/list shows -------------------------------------------------------------------

# anyOf rather than a type array: single-type schema dialects (Gemini's OpenAPI subset) take it, and the
# Inspector's --strict check asks for it (docs/decisions.md).
_NULLABLE_STRING = {"anyOf": [{"type": "string"}, {"type": "null"}]}
_INPUT_FIELDS = ("messageId", "createdAt", "content", "contentChars", "originalChars", "truncated")
_CONVERSATION_FIELDS = (
    "conversationId", "title", "agent", "status", "createdAt", "updatedAt", "createdFromKind",
    "parentConversationId", "userInputCount",
)  # fmt: skip
_CURSOR_ARGUMENT = {
    "type": "string",
    "description": "nextCursor from the previous page of this same query, to read the next page. "
    "Omit for the first page.",
}
_NEXT_CURSOR = {
    **_NULLABLE_STRING,
    "description": "Pass it back as cursor, with the same arguments, for the next page; null on the last page.",
}

USER_INPUTS_TOOL: dict[str, Any] = {
    "name": LIST_USER_INPUTS,
    "title": "List the user's inputs in a conversation",
    "description": (
        "Read-only. Returns what the user asked for in a cc-web conversation: its user messages "
        "(including guided-form submissions), most recent first in selection but returned oldest "
        "first, so you can re-check the requirements before you call the work done. By default it "
        "reads the conversation you are running in; pass conversationId to read another one. "
        "limit (1-50, default 15) caps how many recent inputs are considered; maxChars (1-1000, "
        "default 1000) is a budget of Unicode code points shared by all returned inputs, spent from "
        "the newest input backwards: an input that fits is returned whole, the first one that does "
        "not fit is cut to the remaining budget and marked truncated, and nothing older is returned. "
        "hasMore is true when older inputs exist beyond limit or the budget cut or left some out; "
        "nextCursor is then a string: pass it back as cursor (same conversationId) to read the "
        "older inputs, page by page, until nextCursor is null. The next page starts with the newest "
        "input not yet returned whole, so a cut input comes again from its start; one cut as the "
        "first of its page is longer than maxChars and the next page moves past it (pass the same "
        "cursor again with a larger maxChars to read more of it). limit and maxChars may change "
        "from page to page. Out-of-range numbers are clamped. Errors: invalid_conversation_id, "
        "missing_source_conversation, conversation_not_found, conversation_unreadable, "
        "invalid_cursor (a cursor of another query, or altered: start again without cursor)."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "conversationId": {
                "type": "string",
                "description": "Conversation id (the session file name without .json). "
                "Omit to use the conversation you are running in.",
            },
            "limit": {
                "type": "integer",
                "minimum": INPUTS_LIMIT[0],
                "maximum": INPUTS_LIMIT[1],
                "default": INPUTS_LIMIT[2],
                "description": "How many of the most recent user inputs to consider (default 15).",
            },
            "maxChars": {
                "type": "integer",
                "minimum": INPUTS_MAX_CHARS[0],
                "maximum": INPUTS_MAX_CHARS[1],
                "default": INPUTS_MAX_CHARS[2],
                "description": "Total Unicode code points of content returned, shared by all inputs (default 1000).",
            },
            "cursor": _CURSOR_ARGUMENT,
        },
        "additionalProperties": False,
    },
    "outputSchema": {
        "type": "object",
        "properties": {
            "conversationId": {"type": "string"},
            "limit": {"type": "integer"},
            "maxChars": {"type": "integer"},
            "totalChars": {"type": "integer"},
            "returnedCount": {"type": "integer"},
            "hasMore": {"type": "boolean"},
            "nextCursor": _NEXT_CURSOR,
            "inputs": {
                "type": "array",
                "description": "Oldest first. Each: messageId (string|null), createdAt (ISO-8601 UTC "
                "string|null), content (string), contentChars, originalChars (integers, code points), "
                "truncated (boolean).",
                # Item fields are named, not typed, here: a typed item schema costs every validating
                # client ~7x more per call than the whole rest of the call (docs/benchmarks.md).
                "items": {"type": "object", "required": list(_INPUT_FIELDS)},
            },
        },
        "required": [
            "conversationId", "limit", "maxChars", "totalChars", "returnedCount", "hasMore", "nextCursor", "inputs",
        ],
    },
    "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
}  # fmt: skip

CONVERSATIONS_TOOL: dict[str, Any] = {
    "name": LIST_CONVERSATIONS,
    "title": "List cc-web conversations",
    "description": (
        "Read-only. Lists cc-web conversations as metadata only (never message bodies): id, title, "
        "agent, status, createdAt, updatedAt, createdFromKind, parentConversationId and "
        "userInputCount, most recently updated first. scope \"all\" (the default) lists every "
        "conversation; scope \"children\" lists only the conversations this conversation created "
        "through MCP, direct children only (no branches, no grandchildren); scope \"descendants\" "
        "lists its whole tree of workers: children, their children and so on (each row with its "
        f"depth, 1 for a child, down to depth {DESCENDANTS_MAX_DEPTH}). conversationIds (up to "
        f"{MAX_CONVERSATION_IDS}) lists only those conversations, to check on workers you started; "
        "ids that do not exist are left out. agent and status filter by case-insensitive equality "
        "(status is one of the stored statuses, or \"waiting\" / \"idle\"). Scope, ids and filters "
        "apply before limit (1-100, default 20). The orchestrator's loop: list once; while "
        "nextCursor is a string, pass it back as cursor with the same arguments for the next page; "
        f"then, instead of listing again and again, call {WAIT_FOR_CONVERSATIONS} with the same "
        "selection and since set to the changeToken of the first page (every answer carries one). "
        "Paging never shows a conversation twice or skips one that did not change meanwhile; one "
        "updated while you page moves to the front (it shows in the next first page). Errors: "
        "missing_source_conversation (scope children or descendants without a source conversation), "
        "invalid_conversation_id, too_many_conversation_ids, invalid_cursor (a cursor of another "
        "query, or altered: start again without cursor)."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "description": "Only conversations of this agent, e.g. \"claude\" or \"codex\"."},
            "status": {"type": "string", "description": "Only conversations with this status, e.g. \"idle\" or \"waiting\"."},
            "limit": {
                "type": "integer",
                "minimum": CONVERSATIONS_LIMIT[0],
                "maximum": CONVERSATIONS_LIMIT[1],
                "default": CONVERSATIONS_LIMIT[2],
                "description": "How many conversations to return at most (default 20).",
            },
            "scope": {
                "type": "string",
                "enum": list(SCOPES),
                "default": "all",
                "description": "\"all\" (default): every conversation. \"children\": only those this "
                "conversation created through MCP, direct children only. \"descendants\": children, "
                "their children and so on.",
            },
            "conversationIds": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": MAX_CONVERSATION_IDS,
                "description": f"Only these conversations (up to {MAX_CONVERSATION_IDS} ids); scope and "
                "filters still apply.",
            },
            "cursor": _CURSOR_ARGUMENT,
        },
        "additionalProperties": False,
    },
    "outputSchema": {
        "type": "object",
        "properties": {
            "scope": {"type": "string", "enum": list(SCOPES)},
            "sourceConversationId": _NULLABLE_STRING,
            "limit": {"type": "integer"},
            "returnedCount": {"type": "integer"},
            "hasMore": {"type": "boolean"},
            "nextCursor": _NEXT_CURSOR,
            "conversations": {
                "type": "array",
                "description": "Most recently updated first. Each: conversationId (string), title, agent "
                "(string|null), status (string), createdAt (ISO-8601 UTC string|null), updatedAt (ISO-8601 "
                "UTC string), createdFromKind (string|null), parentConversationId (string|null: the "
                "conversation that created it through MCP), userInputCount (integer); in scope "
                "descendants also depth (integer, 1 for a child).",
                "items": {"type": "object", "required": list(_CONVERSATION_FIELDS)},
            },
            "changeToken": {
                "type": "string",
                "description": f"Opaque. Pass it as since to {WAIT_FOR_CONVERSATIONS} to be woken by the "
                "next change to these conversations.",
            },
        },
        "required": [
            "scope", "sourceConversationId", "limit", "returnedCount", "hasMore", "nextCursor", "conversations",
            "changeToken",
        ],
    },
    "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
}  # fmt: skip


def _wait_tool() -> dict[str, Any]:
    """The list tool's selection and answer, plus `since`, `timeoutSeconds` and what changed: whatever
    the list learns to select, the wait watches (all its arguments but a page cursor)."""
    listing = CONVERSATIONS_TOOL
    selection = {name: spec for name, spec in listing["inputSchema"]["properties"].items() if name != "cursor"}
    low, high, default = WAIT_TIMEOUT
    return {
        "name": WAIT_FOR_CONVERSATIONS,
        "title": "Wait until cc-web conversations change",
        "description": (
            "Read-only. Blocks until a conversation you select changes, then answers at once; use it "
            "instead of calling ccweb_list_conversations in a loop (which costs tokens and time). The "
            "loop: call ccweb_list_conversations once (e.g. scope \"children\" or \"descendants\" for "
            "the workers you started), following its nextCursor to the last page, then call this tool "
            "with the same selection and since set to that list's changeToken (when you paged, the first "
            "page's: a change made while you paged is then reported too); when it answers, act on "
            "changed, and call it again with its new changeToken. A change is a "
            "conversation created, rewritten (new messages), changing status, or deleted; a change made "
            "between two calls is reported by the next call at once, so nothing is missed. The answer "
            "is the ccweb_list_conversations answer for the same selection (scope \"all\" (the "
            "default), \"children\" or \"descendants\" (your whole tree of workers: a grandchild's "
            "change wakes it too), conversationIds, agent, status, limit (1-100, default 20); with its "
            "nextCursor, to read further pages with ccweb_list_conversations), plus changed (each "
            "changed conversation's id and whether it was deleted; a conversation counts when it "
            "matched the selection before or after the change, so one leaving a status filter is "
            "reported too), timedOut (true when nothing changed within timeoutSeconds), tokenReset "
            "(true when since came from an index since rebuilt or was too old: everything listed is "
            f"reported changed) and a new changeToken. timeoutSeconds ({low}-{high}, default {default}) "
            "bounds the wait; keep it below your client's tool time-out. Without since it waits for "
            "changes after the call. Errors: invalid_change_token, missing_source_conversation, "
            "invalid_conversation_id, too_many_conversation_ids, "
            "too_many_waits (this server's cap on concurrent waits is reached; try again later)."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                **selection,
                "since": {
                    "type": "string",
                    "description": "The changeToken of the last ccweb_list_conversations or "
                    f"{WAIT_FOR_CONVERSATIONS} answer. Omit to wait for changes from now on.",
                },
                "timeoutSeconds": {
                    "type": "number",
                    "minimum": low,
                    "maximum": high,
                    "default": default,
                    "description": f"How long to wait for a change at most, in seconds (default {default}).",
                },
            },
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                **listing["outputSchema"]["properties"],
                "changed": {
                    "type": "array",
                    "description": "The selected conversations that changed after since, most recent change "
                    "first. Each: conversationId (string), deleted (boolean).",
                    "items": {"type": "object", "required": ["conversationId", "deleted"]},
                },
                "timedOut": {"type": "boolean"},
                "tokenReset": {"type": "boolean"},
            },
            "required": [*listing["outputSchema"]["required"], "changed", "timedOut", "tokenReset"],
        },
        "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
    }


WAIT_TOOL = _wait_tool()

TOOLS = (USER_INPUTS_TOOL, CONVERSATIONS_TOOL, WAIT_TOOL)
