"""The floor for a tool call: the same MCP SDK, the same low-level `Server` over stdio, a tool that does nothing.

    python -m bench.empty_server [--canned FILE]

Wired exactly like `server.app` (low-level `Server`, `stdio_server()`, `server.run`), with one tool,
`noop`, that returns an empty result at once: no thread hop, no database, no output schema. Whatever
a real tool call costs beyond this, the product or the size of its answer adds.

`--canned FILE` (a diagnostic, not the issue's floor) adds tools that answer a fixed, prebuilt result:
FILE holds `{"tools": [tool definitions], "results": {tool name: structured content}}`. Each such tool
carries the product tool's output schema and returns its answer as the product does (the JSON text
and the same object as structured content), built once at start. A call to one costs what the SDK,
the transport and the client spend on an answer of that size, with no product code at all.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

NOOP = "noop"
_NOOP_TOOL = types.Tool(name=NOOP, description="Does nothing.", input_schema={"type": "object"})
_EMPTY = types.CallToolResult(content=[])


def _canned(path: str | None) -> tuple[list[types.Tool], dict[str, dict[str, Any]]]:
    if not path:
        return [], {}
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    tools = [types.Tool.model_validate(tool) for tool in spec["tools"]]
    # In the wire form the product's tools return (server.app.to_call_result), which the SDK
    # validates and dumps as it does every result: the floor pays what the product pays there.
    results = {
        name: {
            "content": [{"type": "text", "text": json.dumps(payload, ensure_ascii=False, separators=(",", ":"))}],
            "structuredContent": payload,
            "isError": False,
            "resultType": "complete",
        }
        for name, payload in spec["results"].items()
    }
    return tools, results


def build_server(canned_path: str | None = None) -> Server[Any]:
    canned_tools, canned = _canned(canned_path)
    tools = [_NOOP_TOOL, *canned_tools]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult | dict[str, Any]:
        return canned.get(params.name, _EMPTY)

    server: Server[Any] = Server("bench-empty", version="0", on_list_tools=list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)  # as server.app does
    return server


async def serve(canned_path: str | None) -> None:
    server = build_server(canned_path)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.empty_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--canned", help="JSON file of fixed answers to serve as extra tools (a diagnostic)")
    args = ap.parse_args()
    try:
        anyio.run(serve, args.canned)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
