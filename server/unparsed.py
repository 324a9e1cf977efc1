"""Stdio requests the SDK cannot take, answered so that no client waits for them.

The SDK's stdio reader validates each line with pydantic and, when that fails, passes the failure to
the server, which drops it: the client that sent the request waits for an answer until its own time-out
(60 s in the TypeScript SDK, as long as an orchestrator allows a wait). Some of those lines are valid
JSON that pydantic's parser refuses: a lone surrogate escape (`"\\ud800"`, which JavaScript's
`JSON.stringify` writes for half an emoji cut by `slice`), nesting past its depth limit, an integer
past its range. Over HTTP such a body gets the parse error at once (server/http.py). Over stdio it now
gets the same error, addressed to the request's id as the standard library's parser reads it; a line
with a request of the wrong shape (params that are not an object) gets "invalid request". A line
from which no request id can be read is still dropped: no client waits on an id it did not send.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
import pydantic
from mcp.shared.message import SessionMessage

from ccweb_index.server.stdio_lines import Incoming, Receiving

if TYPE_CHECKING:  # the SDK's protocols for its streams, from a module it keeps private
    from mcp.shared._stream_protocols import ReadStream, WriteStream


class AnsweringUnparsed(Receiving):
    """The SDK's stdio read stream, with the requests it could not parse answered and left out."""

    def __init__(self, stream: ReadStream[Incoming], write: WriteStream[SessionMessage]) -> None:
        self._stream = stream
        self._write = write
        self.ended = False  # the client closed stdin (server.stop.SilentAfterHangUp)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)  # the sender's context (`last_context`) the SDK looks for

    async def receive(self) -> Incoming:
        while True:
            try:
                item = await self._stream.receive()
            except anyio.EndOfStream:
                self.ended = True
                raise
            error = refusal(item) if isinstance(item, pydantic.ValidationError) else None
            if error is None:
                return item
            await self._write.send(SessionMessage(error))

    async def aclose(self) -> None:
        await self._stream.aclose()


def refusal(failure: pydantic.ValidationError) -> types.JSONRPCError | None:
    """The error answering a line the SDK refused, when the line is a request with an id."""
    errors = failure.errors()
    for error in errors:
        found = error.get("input")
        parsed = error["type"] == "json_invalid"
        if parsed and isinstance(found, str):
            found = lenient_json(found)
        if isinstance(found, dict) and isinstance(found.get("method"), str) and _is_request_id(found.get("id")):
            reason = errors[0]["msg"]
            if parsed:
                data = types.ErrorData(code=types.PARSE_ERROR, message=parse_error_message(reason, found))
            else:
                data = types.ErrorData(code=types.INVALID_REQUEST, message=f"Invalid request: {reason}")
            return types.JSONRPCError(jsonrpc="2.0", id=found["id"], error=data)
    return None


def parse_error_message(reason: str, request: Any) -> str:
    """The parse error's message for a request the SDK refused (`request`: as `lenient_json` read it,
    or None): pydantic's `reason`, or in plain words the fault clients meet most."""
    if holds_lone_surrogate(request):
        return (
            "Parse error: a string in the request holds a lone UTF-16 surrogate (an escape from \\ud800 to "
            "\\udfff on its own), which is half of a character such as an emoji, cut apart. Send whole "
            "characters."
        )
    return f"Parse error: {reason}"


def holds_lone_surrogate(value: Any) -> bool:
    """Whether a string anywhere in `value` (a JSON value as the standard library reads it) holds one."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if any("\ud800" <= char <= "\udfff" for char in item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def lenient_json(line: str | bytes) -> Any:
    """The line as the standard library reads it, integers of more than 20 digits taken as 0 (only
    the id is wanted, and no client sends one that long; Python refuses to parse beyond 4,300 digits);
    None if it cannot be read."""
    try:
        return json.loads(line, parse_int=lambda digits: int(digits) if len(digits) <= 20 else 0)
    except (ValueError, RecursionError):
        return None


def _is_request_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
