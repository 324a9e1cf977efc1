"""The Python SDK's MCP client, driven one command per line: the same protocol as client.mjs.

    python tests/interop/py_client.py    (stdin: one JSON command per line; stdout: one answer per line)

See client.mjs for the commands. Run as its own process, like the TypeScript client, so both are
driven by the same code (tests/interop/drive.py) and neither shares the test's event loop.

It runs on either major version of the SDK: 2.x, the project's own, and the last 1.x, what
orchestrators written before 2.x run (tests/interop/.venv, from python-sdk-1.txt, .ci/run makes
it). The two differ here only in the HTTP library and the HTTP transport's tuple.
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

try:
    import httpx2 as httpx
    from mcp import Client
except ImportError:  # the SDK 1.x: httpx, and no sessionless `Client`
    import httpx  # type: ignore[no-redef]

    Client = None


class Driver:
    def __init__(self) -> None:
        self.stack: AsyncExitStack | None = None
        self.session: Any = None  # a ClientSession, or a Client (mode)

    async def connect(self, command: dict[str, Any]) -> dict[str, Any]:
        """`mode` (optional): a protocol version to speak without a handshake, e.g. "2026-07-28"
        (sessionless, as Claude Code does), through the SDK's `Client`; else the `initialize` handshake."""
        self.stack = AsyncExitStack()
        if command["transport"] == "stdio":
            params = StdioServerParameters(command=command["command"], args=command["args"], env=command.get("env"))
            transport = stdio_client(params, errlog=sys.stderr)
        else:
            http = await self.stack.enter_async_context(
                httpx.AsyncClient(headers=command.get("headers") or {}, timeout=httpx.Timeout(30, read=120))
            )
            transport = streamable_http_client(command["url"], http_client=http)
        if command.get("mode"):
            assert Client is not None, "this SDK has no sessionless Client"
            client = await self.stack.enter_async_context(Client(transport, mode=command["mode"]))
            self.session = client
            return {"server": client.server_info and client.server_info.model_dump(mode="json"), "protocol": client.protocol_version}
        read, write, *_ = await self.stack.enter_async_context(transport)  # 1.x: and the session id's getter
        session = await self.stack.enter_async_context(ClientSession(read, write))
        result = (await session.initialize()).model_dump(mode="json", by_alias=True)
        self.session = session
        return {"server": result["serverInfo"], "protocol": result["protocolVersion"]}

    async def run(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "connect":
            return await self.connect(command)
        if op == "close":
            return await self.close()
        assert self.session is not None, "connect first"
        if op == "list":
            tools = await self.session.list_tools()
            return {"tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools.tools]}
        if op == "call":
            with anyio.move_on_after(command.get("abandonAfter", float("inf"))):
                result = await self.session.call_tool(command["name"], command.get("arguments") or {})
                return {"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}
            return {"abandoned": True}
        raise ValueError(f"unknown op {op!r}")

    async def close(self) -> dict[str, Any]:
        """What the caller's `async with` would have raised on the way out, if anything: a client
        whose server went away may fail to say goodbye, which some tests allow and some do not."""
        stack, self.stack, self.session = self.stack, None, None
        if stack is not None:
            try:
                await stack.aclose()
            except Exception as exc:
                return {"closeError": f"{type(exc).__name__}: {exc!r}"}
        return {}


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
