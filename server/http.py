"""The shared server: MCP over Streamable HTTP for a whole installation, with a token and a watcher.

One long-running process answers every agent's MCP client. It is the stdio server's `Service` and
`build_server` behind the official SDK's Streamable HTTP transport; only where the source
conversation comes from differs: per request, from the `X-Ccweb-Source-Session` header.

Layers, outside in:

- uvicorn's h11 protocol with the connection limits of server/limits.py (read timeout, connection
  cap with eviction, the peer's uid on a unix socket), before any byte reaches the app.
- `_Guard` (pure ASGI): with a token configured (always, on TCP), every request except `GET /healthz`
  and `/.well-known/...` must carry `Authorization: Bearer <token>` (constant-time comparison), or
  gets a 401 whose JSON body says which token is missing or wrong and where the server's is
  configured. `/.well-known/...` (OAuth discovery) answers 404: there is no OAuth flow to start.
  `/healthz` says more than `ok` only to the token's holders (server/health.py).
- `/mcp`: the SDK's Streamable HTTP transport, stateless: every POST stands alone, no session id is
  issued or kept, so a restart, a second replica or an idle spell never strands a client. GET and
  DELETE answer 405, as the transport specifies for a server without a notification stream or
  sessions. A `tools/call` beyond the caps on calls in flight is answered `too_many_calls` at once. Its DNS-rebinding protection (`Host`, and `Origin` when sent, must name this server)
  applies per request; `/healthz` applies the same check.
- uvicorn, on sockets bound here (so `--port 0` works and bind errors are reported plainly), with
  SIGTERM/SIGINT handled as a drain: stop accepting, let in-flight calls answer, close, exit 0.

A `tools/call` from a client that accepts `text/event-stream` is answered on an SSE stream of its own
(anything the call sends before its answer, such as progress, can travel there); everything else is
plain JSON. No stream outlives its call, so the SSE library's shutdown hook (which would end every
open stream as soon as uvicorn is asked to exit, answers in flight included) is switched off.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import stat
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ccweb_index.process import raise_nofile
from ccweb_index.server.health import State, health, metrics_text
from ccweb_index.server.limits import (
    ACCEPT_BACKLOG,
    CURRENT_SLOT,
    UNCAPPED_TOOLS,
    CallLimiter,
    Connections,
    CountedService,
    Limits,
    LimitsError,
    client_key,
    client_lines_throttled,
    fit_to_descriptors,
    protocol_class,
)
from ccweb_index.server.tools import DEFAULT_MAX_WAITS

log = logging.getLogger("ccweb_index")

SOURCE_HEADER = "X-Ccweb-Source-Session"
TOKEN_ENV = "CCWEB_INDEX_TOKEN"
MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
# Set in each request's scope by the guard: whether it carried the token (or none is configured).
AUTHORIZED = "ccweb_index.authorized"
SOURCE_HEADER_BYTES = SOURCE_HEADER.lower().encode()
# The tool error's code for a call refused by a cap (server/limits.py).
TOO_MANY_CALLS = "too_many_calls"
# Worker threads beyond the calls cap, for /healthz and /metrics.
THREAD_HEADROOM = 8
# OAuth discovery documents live here; this server has none, and says so with a 404 even without a token.
WELL_KNOWN_PREFIX = "/.well-known/"
REALM = "ccweb-index"
# The JSON-RPC error code of a 401's body: in the range JSON-RPC leaves to servers.
UNAUTHORIZED_CODE = -32001
# Long enough for any call to finish: a call waits at most server.from_index.LOCK_WAIT_SECONDS for
# this process's lock, then indexer.db.BUSY_TIMEOUT_MS for another process's, before it answers
# from the files instead.
GRACEFUL_SHUTDOWN_SECONDS = 35
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class StartupError(Exception):
    """A configuration the server refuses to start with; the message says what to change."""


# --- configuration --------------------------------------------------------------------------------


def load_token(token_file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token: from `--token-file` if given, else `CCWEB_INDEX_TOKEN`; None if neither.

    Surrounding whitespace (a trailing newline) is ignored. An empty token file is an error, an empty
    variable counts as unset.
    """
    environ = os.environ if environ is None else environ
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                judge_token_file(token_file, os.fstat(f.fileno()))
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartupError(f"cannot read the token file {token_file!r}: {exc}") from None
        if not token:
            raise StartupError(f"the token file {token_file!r} is empty")
        origin = f"--token-file {token_file}"
    else:
        token = (environ.get(TOKEN_ENV) or "").strip()
        if not token:
            return None
        origin = TOKEN_ENV
    return checked_token(token, origin)


def checked_token(token: str, origin: str) -> str:
    """`token`, if it can go in an HTTP header; `origin` says where it came from, for the message."""
    if not all(0x21 <= ord(c) <= 0x7E for c in token):
        raise StartupError(f"the token from {origin} must be printable ASCII without spaces (it goes in an HTTP header)")
    if len(token) < 16:
        log.warning("the token from %s is short (%d characters); use 32 or more random characters", origin, len(token))
    return token


def judge_token_file(
    path: str | os.PathLike[str], st: os.stat_result, renew: str = "put a new token in it and chmod 600 it"
) -> None:
    """Raise StartupError when someone else chose the token or can read it where the user cannot
    change that: a file of another user's, one of root's that others can read, or one others can
    write, would let them call every tool (an independent test, as real users, planted one where
    the default file goes). Warn when others can read a file of the user's."""
    if st.st_uid not in (os.geteuid(), 0):
        raise StartupError(
            f"the token file {os.fsdecode(path)} belongs to another user (uid {st.st_uid}), who then knows "
            "the token; use a token file of your own"
        )
    if st.st_uid != os.geteuid() and st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        # The user cannot make it private; a link to any file of root's others can read (the next
        # test used /etc/machine-id) gave them the token.
        raise StartupError(
            f"the token file {os.fsdecode(path)} is root's and other users can read it, so they know the "
            "token; use a token file of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StartupError(
            f"other users can write the token file {os.fsdecode(path)}, and so choose the token; {renew}"
        )
    if st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning("the token file %s is readable by other users; chmod 600 it", os.fsdecode(path))


def is_loopback(host: str) -> bool:
    """True when every address `host` stands for is a loopback address."""
    name = host.strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def _host_name(host: str) -> str:
    """How `host` appears in a Host header: IPv6 addresses in brackets."""
    name = host.strip("[]").lower()
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(name).version == 6:
            return f"[{name}]"
    return name


def _host_patterns(value: str) -> list[str]:
    """Host header patterns for one `--allowed-host` value: with a port, exactly; without, any port."""
    value = value.strip().lower()
    if value.startswith("["):
        has_port = "]:" in value
    elif value.count(":") == 1:
        has_port = True
    else:
        has_port = False
        value = _host_name(value)
    return [value] if has_port else [value, f"{value}:*"]


def transport_security(bind_host: str, allowed_hosts: Sequence[str] = ()):  # type: ignore[no-untyped-def]
    """DNS-rebinding protection: the loopback names, the bound address and `--allowed-host` names."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = list(_LOOPBACK_NAMES)
    bound = _host_name(bind_host)
    if bound not in names and bound not in ("0.0.0.0", "[::]", ""):
        names.append(bound)
    hosts: list[str] = []
    for name in names:
        hosts += [name, f"{name}:*"]
    for value in allowed_hosts:
        hosts += _host_patterns(value)
    hosts = list(dict.fromkeys(hosts))
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


# --- the source conversation, per request -----------------------------------------------------------


def source_from_request(ctx: Any) -> str | None:
    """The caller's conversation: the `X-Ccweb-Source-Session` header of this very request.

    No header, or several that disagree, means no source (the tools then say so where they need one).
    """
    request = getattr(ctx, "request", None)
    if request is None:
        return None
    values = set(request.headers.getlist(SOURCE_HEADER))
    source = values.pop().strip() if len(values) == 1 else None
    log.debug("tool call %s (source %s)", getattr(ctx, "request_id", None), source)
    return source or None


# --- the guard ---------------------------------------------------------------------------------------


_CASELESS_HEADERS = frozenset((b"host", b"origin"))


class _Guard:
    """Bearer-token check in front of everything but `GET /healthz` and `/.well-known/...`."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self._token = None if token is None else token.encode("ascii")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Host names are caseless (RFC 3986), and the SDK's rebinding check compares them as sent:
        # `LOCALHOST:8765` was refused. Lower-cased once here, for every check behind the guard.
        scope["headers"] = [(k, v.lower()) if k in _CASELESS_HEADERS else (k, v) for k, v in scope["headers"]]
        refusal = None if self._token is None else self._refusal(scope)
        if refusal is not None and not self._open(scope):
            await _send_unauthorized(send, *refusal)
            return
        scope[AUTHORIZED] = refusal is None
        # The SSE library ends open event streams at shutdown without the final chunk; finish them
        # here so clients see a clean end of stream rather than a truncated response.
        started = finished = False

        async def tracking_send(message: Any) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        await self.app(scope, receive, tracking_send)
        if started and not finished:
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    def _open(scope: Any) -> bool:
        return bool(scope["method"] == "GET" and scope["path"] == HEALTH_PATH) or scope["path"].startswith(
            WELL_KNOWN_PREFIX
        )

    def _refusal(self, scope: Any) -> tuple[str, str] | None:
        """None when the request carries the token; else (RFC 6750 error code or "", what is wrong)."""
        values = [v for k, v in scope["headers"] if k == b"authorization"]
        if not values:
            return "", "No bearer token sent"
        if len(values) > 1:
            return "invalid_request", "More than one Authorization header"
        scheme, _, credentials = values[0].partition(b" ")
        if scheme.lower() != b"bearer":
            return "invalid_request", "Not a bearer token"
        assert self._token is not None
        if hmac.compare_digest(credentials.strip(), self._token):
            return None
        unexpanded = _UNEXPANDED.fullmatch(credentials.strip())
        if unexpanded:  # Claude Code sends `${VAR}` as written when VAR is not set in its environment
            return "invalid_token", f"Bearer token ${{{unexpanded[1].decode()}}} sent unexpanded: the client has no such variable"
        return "invalid_token", "Wrong bearer token"


# A client's placeholder for an environment variable, sent as it was written.
_UNEXPANDED = re.compile(rb"\$\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")


async def _send_unauthorized(send: Any, error: str, what: str) -> None:
    """A 401 a person can act on: what is wrong, and where the token is configured on both sides.
    Where to find the token comes first: Claude Code shows only the beginning of the message, about
    as much as a line. Codex shows only the `WWW-Authenticate` header, so its `error_description`
    says it too (RFC 6750: quoted, printable ASCII)."""
    message = (
        f"{what}. The token is what `ccweb-index token` prints (or the server's {TOKEN_ENV} or "
        "--token-file); send it as `Authorization: Bearer <token>` in this MCP client's headers."
    )
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED_CODE, "message": message}}).encode()
    challenge = f'Bearer realm="{REALM}"'
    if error:
        hint = re.sub(r'[^\x20-\x7e]|["\\]', "", f"{what}; the token is what ccweb-index token prints")
        challenge += f', error="{error}", error_description="{hint}"'
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"www-authenticate", challenge.encode()), (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store"),
    ]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


# --- the app -------------------------------------------------------------------------------------------


def build_app(
    service: Any,
    *,
    token: str | None,
    security: Any,
    state: State | None = None,
    watch: bool = True,
    source_of: Callable[[Any], str | None] = source_from_request,
    waits: Any = None,
) -> Any:
    """The ASGI app: `/mcp` (the SDK's Streamable HTTP transport), `/healthz` and `/metrics`, behind
    the guard. `state.calls`, when set, caps the calls in flight."""
    import anyio
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from ccweb_index.server.app import build_server
    from ccweb_index.server.waits import WaitRoom

    state = state or State()
    host_check = TransportSecurityMiddleware(security)

    async def healthz(request: Request) -> Response:
        refused = await host_check.validate_request(request)
        if refused is not None:
            return refused
        doc = await anyio.to_thread.run_sync(health, service, state, watch)
        # Detail only for the token's holders: counts and lag tell others when the user is active.
        detailed = request.scope.get(AUTHORIZED) and request.query_params.get("detail") not in (None, "", "0")
        body = doc if detailed else {"ok": doc["ok"]}
        return JSONResponse(body, status_code=200 if doc["ok"] else 503, headers={"Cache-Control": "no-store"})

    async def metrics(request: Request) -> Response:
        refused = await host_check.validate_request(request)
        if refused is not None:
            return refused
        doc = await anyio.to_thread.run_sync(health, service, state, watch)
        text = await anyio.to_thread.run_sync(metrics_text, doc)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8", headers={"Cache-Control": "no-store"})

    calls = state.calls
    counted: Any = service if calls is None else CountedService(service)
    mcp_server = build_server(counted, source_of, WaitRoom(DEFAULT_MAX_WAITS) if waits is None else waits)
    endpoint = _StatelessMcp(mcp_server, security, calls, "bearer" if token is not None else "peer")
    app = Starlette(
        routes=[
            Route(MCP_PATH, endpoint),
            Route(HEALTH_PATH, healthz, methods=["GET"]),
            Route(METRICS_PATH, metrics, methods=["GET"]),
        ],
        lifespan=lambda _app: endpoint.run(),
    )
    return _Guard(app, token)


class _StatelessMcp:
    """`/mcp`: one stateless SDK transport answering JSON, one answering a call on its own SSE stream.

    A `tools/call` goes to the SSE one when the client accepts SSE: a call may wait (for the index
    at start, for a lock), and whatever it sends before its answer needs a stream. For the
    2026-07-28 protocol the SDK itself commits to SSE only once something is sent or a call runs
    long. Everything else (initialize, tools/list, notifications) is one JSON answer.
    """

    def __init__(self, mcp_server: Any, security: Any, calls: CallLimiter | None = None, credential: str = "") -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecurityMiddleware
        from sse_starlette.sse import AppStatus

        # Our streams end with their call; the library's shutdown hook would cut answers in flight.
        AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]  # the library has no types here
        self._json = StreamableHTTPSessionManager(mcp_server, json_response=True, stateless=True, security_settings=security)
        self._sse = StreamableHTTPSessionManager(mcp_server, json_response=False, stateless=True, security_settings=security)
        self._host_check = TransportSecurityMiddleware(security)
        self._app = RequestBodyLimitMiddleware(self._route, self._json.max_request_body_size)
        self._calls = calls
        self._credential = credential

    @contextlib.asynccontextmanager
    async def run(self) -> Any:
        if self._calls is not None:
            # Calls run in worker threads: with as many threads as admitted calls (and some for
            # /healthz), an admitted call never queues for a thread.
            import anyio.to_thread

            threads = anyio.to_thread.current_default_thread_limiter()
            threads.total_tokens = max(threads.total_tokens, self._calls.total + THREAD_HEADROOM)
        async with self._json.run(), self._sse.run():
            yield

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] == "POST":
            await self._app(scope, receive, send)
            return
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        refused = await self._host_check.validate_request(Request(scope, receive), is_post=False)
        if refused is None:
            # No session to end and no stream to open: each POST is answered on its own response.
            error = {"code": -32000, "message": "Method Not Allowed: this server is stateless; send each request as a POST"}
            refused = JSONResponse({"jsonrpc": "2.0", "id": None, "error": error}, status_code=405, headers={"Allow": "POST"})
        await refused(scope, receive, send)

    async def _route(self, scope: Any, receive: Any, send: Any) -> None:
        """Read the (size-checked) body once, pick the transport, and hand it the body again."""
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        if (refused := _parse_error(body)) is not None:
            await refused(scope, receive, send)
            return
        call = _tool_call(body)
        manager = self._sse if call is not None and _accepts_sse(scope) else self._json

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        slot = None
        if call is not None and self._calls is not None and _tool_name(call) not in UNCAPPED_TOOLS:
            admitted = self._calls.try_start(client_key(scope["headers"], self._credential, SOURCE_HEADER_BYTES))
            if isinstance(admitted, str):
                await _send_too_many_calls(send, call, admitted)
                return
            slot = admitted
            CURRENT_SLOT.set(slot)  # the worker thread holds it too (CountedService)
        try:
            await manager.handle_request(scope, replay, send)
        finally:
            if slot is not None:
                slot.release()


def _parse_error(body: bytes) -> Any:
    """The SDK's parse error, for a body its 2026-07-28 entry would take though its other transports
    refuse it: that entry parses with `json.loads`, which takes a lone surrogate escape ("\\ud800"),
    where stdio and the older HTTP revision parse with pydantic's parser, which refuses it. Let in,
    such a string in `agent` or `status` reached a query, which SQLite could not bind, and the index
    went into back-off. So every transport refuses the same bodies; None for any other body."""
    if b"\\u" not in body:  # no escape at all: nothing to check
        return None
    import pydantic_core
    from starlette.responses import JSONResponse

    from ccweb_index.server.unparsed import lenient_json, parse_error_message

    try:
        pydantic_core.from_json(body)
    except ValueError as exc:
        error = {"code": -32700, "message": parse_error_message(str(exc), lenient_json(body))}
        return JSONResponse({"jsonrpc": "2.0", "id": None, "error": error}, status_code=400)
    return None


def _tool_call(body: bytes) -> dict[str, Any] | None:
    """The request when `body` is a single `tools/call` request (with an id), else None."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(request, dict) and request.get("method") == "tools/call" and "id" in request:
        return request
    return None


def _tool_name(call: dict[str, Any]) -> str | None:
    params = call.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else None


def _accepts_sse(scope: Any) -> bool:
    from mcp.server.streamable_http import check_accept_headers
    from starlette.requests import Request

    return all(check_accept_headers(Request(scope)))


def _modern(call: dict[str, Any]) -> bool:
    """Whether `call` is a 2026-era request: the SDK routes by the protocol version in its `_meta`."""
    from mcp_types import PROTOCOL_VERSION_META_KEY
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    params = call.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_PROTOCOL_VERSIONS


async def _send_too_many_calls(send: Any, call: dict[str, Any], why: str) -> None:
    """A tool error, at once: the model reads it like any other, and may call again later. Built here,
    not by the SDK (no handler runs), so it takes the result's shape as `to_call_result` does, with
    what the SDK's runner would add for the request's protocol era."""
    from ccweb_index.server.app import to_call_result
    from ccweb_index.server.service import ToolResult

    result = to_call_result(ToolResult({"error": {"code": TOO_MANY_CALLS, "message": why}}, True))
    if not _modern(call):
        del result["resultType"]  # a handshake-era result has none (the runner's sieve drops it)
    body = json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": result}, ensure_ascii=False).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


# --- running ---------------------------------------------------------------------------------------------


@dataclass
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    allowed_hosts: Sequence[str] = ()
    watch: bool = True
    verbose: bool = False
    unix_socket: str | None = None
    limits: Limits = field(default_factory=Limits)
    max_waits: int = DEFAULT_MAX_WAITS


def check_bind(host: str, token: str | None, unix_socket: str | None = None) -> None:
    """A TCP listener needs a token: any local user can connect to a port. A unix socket admits only
    this uid (SO_PEERCRED), so there the token is optional."""
    if token is None and unix_socket is None:
        where = "" if is_loopback(host) else f" on {host}, which is not a loopback address,"
        raise StartupError(
            f"refusing to listen{where} without a token: any local user could read every conversation. "
            f"Set {TOKEN_ENV} or pass --token-file (the command line creates one by default), or serve on "
            "--unix-socket PATH"
        )


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address `host` resolves to, all on one port (`port` 0: a free one).

    An address family the machine lacks (e.g. IPv6 disabled) is skipped; any other failure, such as
    the port being in use, stops the start.
    """
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise StartupError(f"cannot resolve --host {host!r}: {exc.strerror or exc}") from None
    sockets: list[socket.socket] = []
    skipped: list[str] = []
    seen: set[tuple[int, str | int]] = set()
    try:
        for family, type_, proto, _, addr in infos:
            if (family, addr[0]) in seen:
                continue
            seen.add((family, addr[0]))
            if sockets:  # the others take the first one's port, so `--port 0` gives one port for all
                addr = (addr[0], sockets[0].getsockname()[1], *addr[2:])
            try:
                sock = socket.socket(family, type_, proto)
            except OSError as exc:
                skipped.append(f"{addr[0]} ({exc.strerror or exc})")
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(addr)
                sock.listen(ACCEPT_BACKLOG)
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    skipped.append(f"{addr[0]} ({exc.strerror or exc})")
                    continue
                raise StartupError(f"cannot listen on {_host_name(str(addr[0]))}:{addr[1]!s}: {exc.strerror or exc}") from None
            sockets.append(sock)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise StartupError(f"cannot listen on {host}:{port}: " + ", ".join(skipped))
    for what in skipped:
        log.warning("not listening on %s", what)
    return sockets


def bind_unix_socket(path: str) -> socket.socket:
    """A listening unix socket at `path`, 0600 from the start. A stale socket file (nobody listening)
    is replaced; anything else at the path stops the start."""
    from ccweb_index.indexer.private import private_umask

    _clear_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with private_umask():  # never visible with wider permissions, not even between bind and chmod
            sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(ACCEPT_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on the unix socket {path}: {exc.strerror or exc}") from None
    _warn_if_others_can_take(path)
    return sock


def _warn_if_others_can_take(path: str) -> None:
    # The socket admits only this uid, but its clients trust the path: an independent test, as
    # real users, renamed the user's socket in a group's directory and bound its own there, and
    # the user's client sent it the token. Said, as for the index's directory; not refused (the
    # user chose the path, and a sticky /tmp lets nobody else rename it).
    from ccweb_index.indexer.private import others_decide

    directory = os.path.dirname(os.path.abspath(path))
    if others_decide(directory):
        log.warning(
            "other users can make files in %s, the unix socket's directory: one of them can put a socket of "
            "theirs at %s while this server is not listening there (or, without the sticky bit, even while it "
            "is), and your clients would send it their requests; put the socket in a directory only you can write",
            directory,
            path,
        )


def _clear_stale_socket(path: str) -> None:
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StartupError(f"cannot use {path} for the unix socket: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise StartupError(f"{path} exists and is not a socket; choose another --unix-socket path")
    # Another user's socket is theirs, live or not: a connect it refuses (EACCES) is no sign that
    # nobody listens, and in a sticky directory such as /tmp it could not be removed anyway.
    if st.st_uid != os.geteuid():
        raise StartupError(f"{path} is a socket of another user (uid {st.st_uid}); choose another --unix-socket path")
    try:
        gone = _unlink_if_stale(path)
    except OSError as exc:
        raise StartupError(f"cannot remove the stale socket {path}: {exc.strerror or exc}") from None
    if not gone:
        raise StartupError(f"another server is listening on {path}")


def _unlink_if_stale(path: str) -> bool:
    """Remove the socket file at `path` if nobody listens on it; True when it is gone."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except FileNotFoundError:
        return True
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left by a server that is gone
        return True
    finally:
        probe.close()
    return False


def _url(sock: socket.socket) -> str:
    if sock.family == socket.AF_UNIX:
        return f"unix:{sock.getsockname()} (http://localhost{MCP_PATH} through the socket)"
    address, port = sock.getsockname()[:2]
    return f"http://{_host_name(address)}:{port}{MCP_PATH}"


def _make_uvicorn_server(  # type: ignore[no-untyped-def]
    app: Any, verbose: bool, on_exit: Callable[[], None], protocol: type | None = None, limits: Limits | None = None
):
    import uvicorn

    class _Server(uvicorn.Server):
        """uvicorn, with SIGTERM/SIGINT ending `serve()` normally (uvicorn re-raises them after), and
        `on_exit` told first (open waits answer at once rather than hold the drain)."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            on_exit()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=verbose,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        server_header=False,
        http=protocol or "h11",
        timeout_keep_alive=(limits or Limits()).keep_alive_timeout,
        backlog=ACCEPT_BACKLOG,
    )
    return _Server(config)


def serve_http(service: Any, options: HttpOptions, sockets: list[socket.socket] | None = None) -> int:
    """Run until SIGTERM/SIGINT; the service is closed on the way out. Returns the exit status.

    `sockets`: already listening (see `bind_sockets`, `bind_unix_socket`), else bound here from `options`.
    """
    try:
        check_bind(options.host, options.token, options.unix_socket)
        if sockets is None:
            sockets = [bind_unix_socket(options.unix_socket)] if options.unix_socket else bind_sockets(options.host, options.port)
        nofile = raise_nofile()
        limits = fit_to_descriptors(options.limits, len(sockets), nofile)
    except (StartupError, LimitsError) as exc:
        for sock in sockets or ():
            sock.close()
        service.close()
        raise StartupError(str(exc)) from None
    if not options.verbose:
        logging.getLogger("mcp").setLevel(logging.WARNING)  # one INFO line per MCP session opened or closed
    from ccweb_index.server.waits import WaitRoom

    waits = WaitRoom(options.max_waits)
    connections = Connections(limits.max_connections)
    state = State(connections=connections, calls=CallLimiter(limits.max_calls_per_client, limits.max_calls), nofile=nofile)
    app = build_app(service, token=options.token, security=transport_security(options.host, options.allowed_hosts),
                    state=state, watch=options.watch, waits=waits)  # fmt: skip
    peer = os.getuid() if options.unix_socket else None
    server = _make_uvicorn_server(app, options.verbose, waits.stop, protocol_class(connections, limits, peer), limits)
    # A signal before uvicorn takes over (it installs its own handlers in serve()) still stops cleanly.
    previous = {
        sig: signal.signal(sig, lambda *_: setattr(server, "should_exit", True)) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    unix_paths = [str(sock.getsockname()) for sock in sockets if sock.family == socket.AF_UNIX]
    starter = threading.Thread(target=_start, args=(service, state), name="ccweb-index-start", daemon=True)
    starter.start()
    for sock in sockets:
        log.info("serving MCP on %s", _url(sock))
    log.info("limits: %s", ", ".join(f"{k}={v}" for k, v in vars(limits).items()))
    try:
        with client_lines_throttled():
            asyncio.run(server.serve(sockets=sockets))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _close_listeners(sockets, unix_paths)
        mid_pass = not state.ready.is_set()
        if not mid_pass:
            starter.join()
            service.close()
            log.info("stopped")
    if mid_pass:  # every call has been answered; the first pass is not waited for
        from ccweb_index.server.stop import exit_mid_pass

        exit_mid_pass()
    return 0


def _start(service: Any, state: State) -> None:
    try:
        service.start()
    except Exception:
        state.start_failed = True
        log.exception("initial indexing failed; calls will index what they need")
    finally:
        state.ready.set()


def _close_listeners(sockets: list[socket.socket], unix_paths: list[str]) -> None:
    """Close them (uvicorn may have); the unix sockets' files go too, unless another server took the
    path over meanwhile."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()
    for path in unix_paths:
        with contextlib.suppress(OSError):
            _unlink_if_stale(path)
