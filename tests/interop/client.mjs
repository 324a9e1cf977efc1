// The TypeScript SDK's MCP client (1.x, pinned in package.json), driven one command per line.
//
//   node client.mjs        (stdin: one JSON command per line; stdout: one JSON answer per line)
//
// Commands, in the order a real client sends them:
//   {"op": "connect", "transport": "stdio", "command": "...", "args": [...], "env": {...}}
//   {"op": "connect", "transport": "http", "url": "http://127.0.0.1:PORT/mcp", "headers": {...}}
//   {"op": "list"}                                   tools/list (the client caches the output schemas)
//   {"op": "call", "name": "...", "arguments": {...}} tools/call, checked by the client as it does for any caller
//       "abandonAfter": seconds (optional): the caller gives the call up then; answers {"abandoned": true}
//   {"op": "close"}                                  answers {"closeError": "..."} if closing raised
// Each answer is {"ok": true, ...} or {"ok": false, "error": {"name", "code", "message"}}: whatever
// the client library raised, as a caller of it would see it. tests/interop/drive.py speaks this.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

let client = null;

function transportFor(command) {
  if (command.transport === "stdio") {
    return new StdioClientTransport({ command: command.command, args: command.args, env: command.env, stderr: "inherit" });
  }
  return new StreamableHTTPClientTransport(new URL(command.url), { requestInit: { headers: command.headers ?? {} } });
}

async function run(command) {
  switch (command.op) {
    case "connect": {
      client = new Client({ name: "ccweb-index-interop-ts", version: "0" });
      await client.connect(transportFor(command));
      return { server: client.getServerVersion(), protocol: client.transport?.protocolVersion ?? null };
    }
    case "list":
      return { tools: (await client.listTools()).tools };
    case "call": {
      const params = { name: command.name, arguments: command.arguments ?? {} };
      if (command.abandonAfter === undefined) return { result: await client.callTool(params) };
      const signal = AbortSignal.timeout(command.abandonAfter * 1000);
      try {
        return { result: await client.callTool(params, undefined, { signal }) };
      } catch (error) {
        if (signal.aborted) return { abandoned: true };
        throw error;
      }
    }
    case "close": {
      const closing = client;
      client = null;
      try {
        await closing?.close();
      } catch (error) {
        return { closeError: String(error?.message ?? error) };
      }
      return {};
    }
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = { ok: true, ...(await run(JSON.parse(line))) };
  } catch (error) {
    answer = { ok: false, error: { name: error?.constructor?.name ?? "Error", code: error?.code ?? null, message: String(error?.message ?? error) } };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await client?.close();
