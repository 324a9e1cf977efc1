"""The MCP server: the official SDK's low-level `Server`, wired to the service's tools.

The two list tools run in a worker thread (or inline for stdio); the wait (server.waits) runs as a
task on the event loop, holding no thread while it waits, and reports progress on its request.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext

from ccweb_index.server.stdio_lines import stdio_transport
from ccweb_index.server.stop import (
    SilentAfterHangUp,
    calls_in_flight,
    exit_on_sigterm,
    exit_when_stdout_is_gone,
    stopping,
)
from ccweb_index.server.tools import TOOLS, WAIT_FOR_CONVERSATIONS, answer_too_large
from ccweb_index.server.unparsed import AnsweringUnparsed
from ccweb_index.server.waits import WaitRoom

if TYPE_CHECKING:  # imported when a call needs it: the index is opened beside the server (LazyService)
    from ccweb_index.server.service import Service, ToolResult

log = logging.getLogger("ccweb_index")

SourceOf = Callable[[ServerRequestContext[Any]], str | None]

_TOOL_LIST = [types.Tool.model_validate(spec) for spec in TOOLS]
# What a client may show its model about the server before its tools (initialize's `instructions`).
INSTRUCTIONS = (
    "Read-only cc-web conversations. ccweb_list_user_inputs: what the user asked for. ccweb_list_conversations: "
    "lists them; scope \"children\": those this one made. ccweb_wait_for_conversations: after a list, wait with "
    "since = its changeToken."
)


def _version() -> str:
    try:
        return version("ccweb-index")
    except PackageNotFoundError:
        return "0"


# The TypeScript SDK 1.x's stdio transport drops the connection, and every call after it, when its read
# buffer would pass STDIO_DEFAULT_MAX_BUFFER_SIZE (10 MiB); the buffer also holds the start of what
# follows a message. An answer that would make a larger message than this is a tool error instead.
MAX_MESSAGE_BYTES = 8 * 2**20
# What a success's message holds besides its text twice: the JSON-RPC envelope, the content block's
# keys, resultType and the SDK's serverInfo stamp, with room to spare.
_ENVELOPE_BYTES = 4096


def message_bytes(text: str) -> int:
    """At most the size of the stdio line carrying the success `text` (and of the body on the older
    HTTP revision): the text once as `structuredContent` and once as a JSON string, in which its
    quotes and backslashes are escaped again. A code point is at most 4 bytes of UTF-8, so at most 8
    in all: short texts are not encoded. The 2026-07-28 HTTP entry writes JSON with non-ASCII
    escaped, a larger body for the same answer; no HTTP client we know limits a body's size."""
    if len(text) * 8 + _ENVELOPE_BYTES <= MAX_MESSAGE_BYTES:
        return len(text) * 8 + _ENVELOPE_BYTES
    encoded = text.encode()
    return 2 * len(encoded) + encoded.count(b'"') + encoded.count(b"\\") + _ENVELOPE_BYTES


def to_call_result(result: ToolResult) -> dict[str, Any]:
    """A success carries its answer twice (text and `structuredContent`, which `outputSchema` describes);
    an error only as text, with `isError`. Clients that check `structuredContent` against the output
    schema even on errors (TypeScript SDK 1.x, the Inspector) would otherwise turn every tool error
    into a schema violation and lose its code and message (docs/decisions.md).

    In its wire form, a dict: the SDK validates every result against the protocol version's
    `CallToolResult` before it sends it (`ServerRunner._serialize`), so building the model here as
    well would walk the whole answer twice more, once to validate it and once to dump it again."""
    text = result.text()
    if result.is_error:
        # `resultType`: as the model dumps it; the 2026-07-28 surface requires it, older ones drop it.
        return {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}
    if (size := message_bytes(text)) > MAX_MESSAGE_BYTES:
        return to_call_result(_too_large(size))
    return success_result(text, result.payload)


def success_result(text: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A success as it goes to the SDK: `payload` as `structuredContent` and as `text`, its JSON."""
    return {"content": [{"type": "text", "text": text}], "structuredContent": payload, "isError": False, "resultType": "complete"}


def guarded_call(service: Service | LazyService, name: str, arguments: Any, source: str | None) -> ToolResult:
    """`service.call`, with any failure it did not foresee answered as a tool error, not a traceback."""
    try:
        with calls_in_flight:
            return service.call(name, arguments, source)
    except Exception:
        return _internal_error(name)


async def guarded_wait(
    service: Service | LazyService, room: WaitRoom, arguments: Any, source: str | None, ctx: ServerRequestContext[Any]
) -> ToolResult:
    """The wait (server.waits) on this loop; like `guarded_call`, a failure it did not foresee is a tool error."""
    from ccweb_index.server.service import ToolResult
    from ccweb_index.server.waits import wait_for_conversations

    async def report(waited: float, timeout: float) -> None:
        # A no-op unless the request carries a progress token.
        await ctx.session.report_progress(round(waited, 1), timeout, f"waited {waited:.0f} s of {timeout:g} s; nothing changed yet")

    try:
        if isinstance(service, LazyService):
            if not service.opened and not await anyio.to_thread.run_sync(service.wait, abandon_on_cancel=True):
                raise RuntimeError(f"the service could not be opened: {service.error}")
            service = service.service
        arguments = arguments if isinstance(arguments, dict) else {}
        return ToolResult(*await wait_for_conversations(service, room, arguments, source, report))
    except Exception:
        return _internal_error(WAIT_FOR_CONVERSATIONS)


def _too_large(size: int) -> ToolResult:
    from ccweb_index.server.service import ToolResult

    log.warning("an answer of about %.1f MiB was refused as answer_too_large", size / 2**20)
    return ToolResult(answer_too_large(size, MAX_MESSAGE_BYTES).payload(), True)


def _internal_error(name: object) -> ToolResult:
    from ccweb_index.server.service import ToolResult

    log.exception("tool call %r failed unexpectedly", name[:80] if isinstance(name, str) else name)
    return ToolResult(
        {"error": {"code": "internal_error", "message": "The server failed to answer this call (the reason "
                   "is in its log). Try again; if it keeps failing, report it."}},
        True,
    )


class LazyService:
    """A `Service` opened in a background thread: the server answers `initialize` and `tools/list`
    meanwhile, and a call waits for it. `open_service` failing (a configuration error, such as an
    index that belongs to another directory) stops the server; the error is kept in `error`."""

    def __init__(self, open_service: Callable[[], Service]) -> None:
        self._open_service = open_service
        self._opened = threading.Event()
        self._service: Service | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._open, name="ccweb-index-open", daemon=True).start()

    def _open(self) -> None:
        try:
            self._service = self._open_service()
        except BaseException as exc:
            self.error = exc
        finally:
            self._opened.set()

    @property
    def opened(self) -> bool:
        return self._opened.is_set()

    def wait(self) -> bool:
        """Wait until the service is open; False when it could not be opened."""
        self._opened.wait()
        return self._service is not None

    @property
    def service(self) -> Service:
        """The opened service (call once `wait()` said True)."""
        if not self.wait():
            raise RuntimeError(f"the service could not be opened: {self.error}")
        assert self._service is not None
        return self._service

    def call(self, name: str, arguments: Any, source: str | None) -> ToolResult:
        return self.service.call(name, arguments, source)

    def close(self, *, wait: bool = True) -> None:
        """`wait=False` (SIGTERM): do not wait for an opening still under way (a first index of a
        large directory); SQLite rolls back what it leaves unfinished, and the index is a cache."""
        if (self._opened.wait() if wait else self._opened.is_set()) and self._service is not None:
            self._service.close(wait=wait)


def build_server(
    service: Service | LazyService, source_of: SourceOf, waits: WaitRoom, *, in_thread: bool = True
) -> Server[Any]:
    """`source_of` tells, per request, which conversation the caller runs in (never the LLM's choice).
    `waits`: the server's open waits (their cap; ended at shutdown).

    `in_thread`: run each call in a worker thread, so that concurrent clients (HTTP) are served while
    one call waits on SQLite or a file. A stdio server has one client and one call at a time, and
    saves the thread hop.
    """

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_TOOL_LIST)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> dict[str, Any]:
        source = source_of(ctx)
        if params.name == WAIT_FOR_CONVERSATIONS:
            return to_call_result(await guarded_wait(service, waits, params.arguments, source, ctx))
        opened = not isinstance(service, LazyService) or service.opened
        if in_thread or not opened:  # the wait for the index must not block the loop
            result = await anyio.to_thread.run_sync(guarded_call, service, params.name, params.arguments, source)
        else:
            result = guarded_call(service, params.name, params.arguments, source)
        return to_call_result(result)

    server: Server[Any] = Server(
        "ccweb-index",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
    )
    # Registered as a request handler, whose type admits the wire-form dict (to_call_result);
    # `on_call_tool` is typed for the model alone, though the runner serializes either.
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    return server


async def serve_stdio(service: Service | LazyService, source: str | None, max_waits: int) -> None:
    """Serve one client over stdin/stdout until it closes them, or until a `LazyService` fails to open.
    SIGTERM answers the waits in flight (`timedOut`) before the process exits."""
    waits = WaitRoom(max_waits)
    server = build_server(service, lambda ctx: source, waits, in_thread=False)
    close = functools.partial(service.close, wait=False)
    stop_watching = exit_when_stdout_is_gone(os.dup(1), close)  # fd 1 before the SDK points it elsewhere
    try:
        await _serve_stdio(server, service, waits, close)
    finally:
        stop_watching()


async def _serve_stdio(server: Server, service: Service | LazyService, waits: WaitRoom, close: Callable[[], None]) -> None:
    async with stdio_transport() as (read_stream, write_stream), anyio.create_task_group() as tasks:

        async def end_waits() -> None:
            waits.stop()  # each open wait answers `timedOut`
            await waits.emptied()

        tasks.start_soon(exit_on_sigterm, write_stream, close, end_waits)  # server.stop: why it exits so
        if isinstance(service, LazyService):
            tasks.start_soon(_stop_unless_opened, service, tasks.cancel_scope)
        incoming = AnsweringUnparsed(read_stream, write_stream)  # no client waits on a line the SDK refused
        outgoing = SilentAfterHangUp(write_stream, lambda: incoming.ended)
        await server.run(incoming, outgoing, server.create_initialization_options())
        stopping("the client closed stdin")
        tasks.cancel_scope.cancel()


async def _stop_unless_opened(service: LazyService, scope: anyio.CancelScope) -> None:
    if not await anyio.to_thread.run_sync(service.wait, abandon_on_cancel=True):
        scope.cancel()
