"""The Python SDK's MCP client, driven one command per line: the same protocol as client.mjs.

    python tests/interop/py_client.py    (stdin: one JSON command per line; stdout: one answer per line)

See client.mjs for the commands. Run as its own process, like the TypeScript client, so both are
driven by the same code (tests/interop/drive.py) and neither shares the test's event loop.
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


class Driver:
    def __init__(self) -> None:
        self.stack: AsyncExitStack | None = None
        self.session: ClientSession | Client | None = None

    async def connect(self, command: dict[str, Any]) -> dict[str, Any]:
        """`mode` (optional): a protocol version to speak without a handshake, e.g. "2026-07-28"
        (sessionless, as Claude Code does), through the SDK's `Client`; else the `initialize` handshake."""
        self.stack = AsyncExitStack()
        if command["transport"] == "stdio":
            params = StdioServerParameters(command=command["command"], args=command["args"], env=command.get("env"))
            transport = stdio_client(params, errlog=sys.stderr)
        else:
            http = await self.stack.enter_async_context(
                httpx2.AsyncClient(headers=command.get("headers") or {}, timeout=httpx2.Timeout(30, read=120))
            )
            transport = streamable_http_client(command["url"], http_client=http)
        if command.get("mode"):
            client = await self.stack.enter_async_context(Client(transport, mode=command["mode"]))
            self.session = client
            return {"server": client.server_info and client.server_info.model_dump(mode="json"), "protocol": client.protocol_version}
        read, write = await self.stack.enter_async_context(transport)
        session = await self.stack.enter_async_context(ClientSession(read, write))
        result = await session.initialize()
        self.session = session
        return {"server": result.server_info.model_dump(mode="json"), "protocol": result.protocol_version}

    async def run(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "connect":
            return await self.connect(command)
        if op == "close":
            await self.close()
            return {}
        assert self.session is not None, "connect first"
        if op == "list":
            tools = await self.session.list_tools()
            return {"tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools.tools]}
        if op == "call":
            result = await self.session.call_tool(command["name"], command.get("arguments") or {})
            return {"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}
        raise ValueError(f"unknown op {op!r}")

    async def close(self) -> None:
        stack, self.stack, self.session = self.stack, None, None
        if stack is not None:
            try:
                await stack.aclose()
            except Exception:  # a client whose server went away may fail to say goodbye; not our concern
                pass


async def main() -> None:
    driver = Driver()
    stdin = anyio.wrap_file(sys.stdin)
    async for line in stdin:
        if not line.strip():
            continue
        try:
            answer = {"ok": True, **(await driver.run(json.loads(line)))}
        except Exception as exc:
            answer = {"ok": False, "error": {"name": type(exc).__name__, "code": getattr(getattr(exc, "error", None), "code", None), "message": str(exc)}}
        print(json.dumps(answer), flush=True)
    await driver.close()


if __name__ == "__main__":
    anyio.run(main)
