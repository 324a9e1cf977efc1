"""The MCP server: the official SDK's low-level `Server`, wired to the service's two tools."""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from ccweb_index.server.service import Service, ToolResult
from ccweb_index.server.stop import calls_in_flight, exit_on_sigterm
from ccweb_index.server.tools import TOOLS

log = logging.getLogger("ccweb_index")

SourceOf = Callable[[ServerRequestContext[Any]], str | None]

_TOOL_LIST = [types.Tool.model_validate(spec) for spec in TOOLS]


def _version() -> str:
    try:
        return version("ccweb-index")
    except PackageNotFoundError:
        return "0"


def to_call_result(result: ToolResult) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=result.text())],
        structured_content=result.payload,
        is_error=result.is_error,
    )


def guarded_call(service: Service, name: str, arguments: Any, source: str | None) -> ToolResult:
    """`service.call`, with any failure it did not foresee answered as a tool error, not a traceback."""
    try:
        with calls_in_flight:
            return service.call(name, arguments, source)
    except Exception:
        log.exception("tool call %r failed unexpectedly", name[:80] if isinstance(name, str) else name)
        return ToolResult(
            {"error": {"code": "internal_error", "message": "The server failed to answer this call (the reason "
                       "is in its log). Try again; if it keeps failing, report it."}},
            True,
        )


def build_server(service: Service, source_of: SourceOf, *, in_thread: bool = True) -> Server[Any]:
    """`source_of` tells, per request, which conversation the caller runs in (never the LLM's choice).

    `in_thread`: run each call in a worker thread, so that concurrent clients (HTTP) are served while
    one call waits on SQLite or a file. A stdio server has one client and one call at a time, and
    saves the thread hop.
    """

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_TOOL_LIST)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        source = source_of(ctx)
        if in_thread:
            result = await anyio.to_thread.run_sync(guarded_call, service, params.name, params.arguments, source)
        else:
            result = guarded_call(service, params.name, params.arguments, source)
        return to_call_result(result)

    return Server(
        "ccweb-index",
        version=_version(),
        instructions=(
            "Read-only access to cc-web conversations: ccweb_list_user_inputs re-reads what the user "
            "asked for; ccweb_list_conversations lists conversations, or with scope \"children\" the ones "
            "this conversation created through MCP."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(service: Service, source: str | None) -> None:
    server = build_server(service, lambda ctx: source, in_thread=False)
    async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as tasks:
        tasks.start_soon(exit_on_sigterm, write_stream, service.close)  # server.stop: why it exits so
        await server.run(read_stream, write_stream, server.create_initialization_options())
        tasks.cancel_scope.cancel()
