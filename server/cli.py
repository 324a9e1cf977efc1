"""The `ccweb-index` command: small click commands over the indexer and the service."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import click

from ccweb_index.indexer.errors import IndexFailure, IndexInsideSessions, IndexMismatch
from ccweb_index.indexer.files import DEFAULT_MAX_SESSION_BYTES, ignored_entries
from ccweb_index.indexer.load import PARSE_BYTES_IN_FLIGHT
from ccweb_index.indexer.progress import PROGRESS_LOG_SECONDS, LoggedProgress, Progress
from ccweb_index.server.tools import DEFAULT_MAX_WAITS

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ccweb_index.server.bar import BarProgress
    from ccweb_index.server.service import Service

# The service (SQLite, sqlite-utils, the indexer's writing side) and the MCP SDK are imported by the
# commands that use them: `serve` answers `initialize` before it opens the index (docs/decisions.md).

log = logging.getLogger("ccweb_index")


class Seconds(click.FloatRange):
    """A number of seconds in a range: nan passes FloatRange's comparisons, and inf its maximum-less one."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


def _setup_logging(verbose: bool, quiet: int = logging.INFO) -> None:
    # stdout is the MCP channel for `serve`; every log line goes to stderr.
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else quiet,
        format="%(asctime)s ccweb-index %(levelname)s %(message)s",
    )


def _sessions_dir_option(func: Any) -> Any:
    func = _refusing_db_inside_sessions(func)
    func = click.option(
        "--sessions-dir",
        envvar="CCWEB_SESSIONS_DIR",
        required=True,
        type=click.Path(file_okay=False, path_type=str),
        help="cc-web's sessions directory (env CCWEB_SESSIONS_DIR). Only ever read.",
    )(func)
    func = click.option(
        "--db",
        envvar="CCWEB_INDEX_DB",
        type=click.Path(dir_okay=False, path_type=str),
        help="Index file (env CCWEB_INDEX_DB). Default: one per sessions directory in the user cache directory.",
    )(func)
    func = click.option(
        "--max-session-bytes",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_SESSION_BYTES,
        show_default=True,
        help="Session files larger than this are not read, and count as unreadable.",
    )(func)
    func = click.option(
        "--parse-bytes-in-flight",
        envvar="CCWEB_PARSE_BYTES_IN_FLIGHT",
        type=click.IntRange(min=1),
        default=PARSE_BYTES_IN_FLIGHT,
        show_default=True,
        expose_value=False,
        callback=_remember,
        help="Cap on the bytes of the session files being parsed at once (env CCWEB_PARSE_BYTES_IN_FLIGHT); "
        "a single larger file is still parsed, alone.",
    )(func)
    func = click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")(func)
    return func


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # Settings every command passes straight to the Service, kept off the commands' signatures.
    if param.name is not None:
        ctx.meta[param.name] = value
    return value


def _refusing_db_inside_sessions(command: Any) -> Any:
    # Checked before the command does anything (binds a port, opens the index): the sessions
    # directory is only ever read, so an index inside it is a usage error (exit 2).
    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> Any:
        from ccweb_index.indexer.db import resolve_db_path

        try:
            resolve_db_path(kwargs["sessions_dir"], kwargs["db"])
        except IndexInsideSessions as exc:
            raise click.BadParameter(str(exc), param_hint="'--db' / CCWEB_INDEX_DB") from None
        except IndexMismatch as exc:
            raise click.ClickException(str(exc)) from None
        return command(*args, **kwargs)

    return checked


def _parse_budget() -> int:
    # Kept by _remember in click's context, which belongs to the command's thread.
    budget = click.get_current_context().meta.get("parse_bytes_in_flight", PARSE_BYTES_IN_FLIGHT)
    return int(budget)


def _open_service(sessions_dir: str, db: str | None, max_session_bytes: int, **kwargs: Any) -> Service:
    from ccweb_index.server.service import Service

    if "parse_bytes_in_flight" not in kwargs:
        kwargs["parse_bytes_in_flight"] = _parse_budget()
    try:
        return Service(sessions_dir, db, max_session_bytes=max_session_bytes, **kwargs)
    except IndexMismatch as exc:
        raise click.ClickException(str(exc)) from None


def _require_index(service: Service) -> None:
    if not service.handle.is_open:
        raise click.ClickException(f"cannot open the index {service.db_path}: {service.handle.reason}")


def _require_dir(sessions_dir: str) -> None:
    if not os.path.isdir(sessions_dir):
        raise click.ClickException(f"the sessions directory {sessions_dir!r} does not exist or is not a directory")


def _paths_print_as_bytes() -> None:
    # Paths are bytes (docs/decisions.md): a sessions path that is not UTF-8 reaches us with
    # surrogate escapes, which a strict UTF-8 stream refuses. On stdout it prints as its own bytes
    # (as `ls` would); in the log, escaped.
    for stream, errors in ((sys.stdout, "surrogateescape"), (sys.stderr, "backslashreplace")):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=errors)


def _say(text: str | bytes) -> None:
    """A line of a command's output, on stdout: text in the locale's encoding, or bytes as they are
    (`call`'s JSON, in UTF-8 whatever the locale, as jq writes it: a user's words fit no narrower
    charset, and under latin-1 the first CJK character ended `call` in a traceback).

    A stdout that cannot take it (a full disk, an I/O error) ends the command with one plain line
    on stderr, not a traceback. A closed pipe stays click's: a quiet exit."""
    try:
        click.echo(text)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise
        # What is still buffered would fail again as the interpreter exits, with a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise click.ClickException(f"cannot write to standard output: {exc.strerror or exc}") from None


@click.group()
@click.version_option(package_name="ccweb-index")
def main() -> None:
    """Index cc-web session files in SQLite and answer cc-web's MCP tools from the index."""
    _paths_print_as_bytes()


@main.command()
@_sessions_dir_option
@click.option(
    "--progress-seconds",
    envvar="CCWEB_INDEX_PROGRESS_SECONDS",
    type=Seconds(min=0),
    default=PROGRESS_LOG_SECONDS,
    show_default=True,
    help="When stderr is not a terminal: log a progress line this often (on a terminal, a bar shows it).",
)
def build(sessions_dir: str, db: str | None, max_session_bytes: int, verbose: bool, progress_seconds: float) -> None:
    """Bring the index in line with the sessions directory, then exit.

    Incremental: files whose stat signature did not change are not read.
    """
    _setup_logging(verbose)
    _require_dir(sessions_dir)
    service = _open_service(sessions_dir, db, max_session_bytes, meanwhile=None)  # its error says why
    try:
        _require_index(service)
        started = time.perf_counter()
        try:
            with _build_progress(progress_seconds) as progress:
                stats = service.indexer.reconcile(progress=progress)
            service.settle()
            counts = service.counts()
        except IndexFailure as exc:
            raise click.ClickException(f"cannot write the index {service.db_path}: {exc}") from None
        elapsed = time.perf_counter() - started
    finally:
        service.close()
    click.echo(
        f"{counts['sessions']} sessions, {counts['inputs']} user inputs, {counts['unreadable']} unreadable; "
        f"read {stats.read} files, removed {stats.removed}, in {elapsed:.2f} s",
        err=True,
    )


def _build_progress(every: float) -> contextlib.AbstractContextManager[Progress]:
    # A bar for a person at a terminal; in a log (CI, cron, a pipe) a line every `every` seconds.
    if sys.stderr.isatty():
        from ccweb_index.server.bar import BarProgress

        return _unwound_by_sigterm(BarProgress(sys.stderr))
    return contextlib.nullcontext(LoggedProgress("build", every=every, announce=False))


@contextlib.contextmanager
def _unwound_by_sigterm(bar: BarProgress) -> Iterator[BarProgress]:
    # SIGTERM's default action left the terminal as the bar had set it, its cursor hidden. Raised as
    # SystemExit it unwinds through the bar's end, as Ctrl-C does, and through the index's close,
    # which waits for the parse workers (a second or so). The process then exits with 143, what a
    # shell shows for a SIGTERM, rather than dying by it.
    previous = signal.signal(signal.SIGTERM, _exit_as_terminated)
    try:
        with bar:
            yield bar
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_as_terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@main.command()
@_sessions_dir_option
@click.option("--poll", is_flag=True, help="Poll the directory instead of using inotify (e.g. network filesystems).")
def watch(sessions_dir: str, db: str | None, max_session_bytes: int, verbose: bool, poll: bool) -> None:
    """Build, then keep the index in line with the directory until SIGINT/SIGTERM.

    If the directory is removed, renamed or replaced while watched, the new one at the path is
    watched when it appears.
    """
    # Imported before the handler can run: an import inside it could meet a module half made.
    from ccweb_index.indexer.handle import TRYING_AGAIN
    from ccweb_index.server.stop import exit_mid_pass

    _setup_logging(verbose)
    _require_dir(sessions_dir)
    service = _open_service(sessions_dir, db, max_session_bytes, watch=True, poll=poll, meanwhile=TRYING_AGAIN)
    stop, started = threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        if not started.is_set():  # the first pass holds the index: leave it unfinished
            exit_mid_pass()
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        service.start()
        started.set()
        log.info("watching %s (index %s)", service.sessions_dir, service.db_path)
        stop.wait()
    finally:
        service.close()
    log.info("stopped")


# HTTP only: (option, Limits field, type, help). Defaults come from server.limits.Limits.
_LIMIT_OPTIONS = (
    ("--read-timeout", "read_timeout", Seconds(min=0.1), "seconds a client has to send a whole request "
     "(headers and body), from connecting or from its previous answer; a slower one is disconnected"),
    ("--keep-alive-timeout", "keep_alive_timeout", click.IntRange(min=1), "seconds an idle connection is kept "
     "open after an answer"),
    ("--max-connections", "max_connections", click.IntRange(min=1), "open connections at most; one more closes the "
     "longest-idle one (lowered to fit the open-files limit less --fd-reserve)"),
    ("--fd-reserve", "fd_reserve", click.IntRange(min=0), "file descriptors kept for the index, session files and "
     "watcher, never used by connections"),
    ("--max-calls", "max_calls", click.IntRange(min=1), "tool calls in progress at most; one more is refused at once "
     "with the tool error too_many_calls"),
    ("--max-calls-per-client", "max_calls_per_client", click.IntRange(min=1), "tool calls in progress at most per "
     "client (token and X-Ccweb-Source-Session); one more is refused at once"),
)  # fmt: skip


def _limit_options(func: Any) -> Any:
    """The limits' options, collected into one `limits` argument: {Limits field: value given}."""
    from ccweb_index.server.limits import Limits

    @functools.wraps(func)
    def collected(*args: Any, **kwargs: Any) -> Any:
        given = {field: kwargs.pop(field) for _, field, _, _ in _LIMIT_OPTIONS}
        return func(*args, limits={k: v for k, v in given.items() if v is not None}, **kwargs)

    for option, field, kind, text in reversed(_LIMIT_OPTIONS):
        default = getattr(Limits(), field)
        collected = click.option(option, field, type=kind, help=f"HTTP only: {text}.  [default: {default}]")(collected)
    return collected


@main.command()
@_sessions_dir_option
@click.option(
    "--source-session",
    envvar="CCWEB_SOURCE_SESSION_ID",
    help="The conversation this server answers for (env CCWEB_SOURCE_SESSION_ID). Stdio only: over HTTP "
    "the source comes with each request, in the X-Ccweb-Source-Session header.",
)
@click.option("--no-watch", is_flag=True, help="Do not run a watcher in this process.")
@click.option("--poll", is_flag=True, help="Poll instead of using inotify.")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: one server per conversation, spawned by the MCP client. http: one shared server (MCP "
    "Streamable HTTP at /mcp, health at /healthz).",
)
@click.option("--host", help="HTTP only: address to listen on.  [default: 127.0.0.1]")
@click.option("--port", type=click.IntRange(0, 65535), help="HTTP only: port to listen on (0: any free port).  [default: 8765]")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=str),
    help="HTTP only: file holding the bearer token clients must send (else env CCWEB_INDEX_TOKEN, else "
    "the token `ccweb-index token` prints, created on first use).",
)
@click.option(
    "--unix-socket",
    type=click.Path(dir_okay=False, path_type=str),
    help="HTTP only: listen on this unix socket (0600; only this user's processes are let in, checked by "
    "uid) instead of a TCP port. No token is needed unless one is configured.",
)
@click.option(
    "--max-waits",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_WAITS,
    show_default=True,
    help="How many ccweb_wait_for_conversations calls may be open at once; beyond it a wait is refused "
    "(too_many_waits).",
)
@click.option(
    "--allowed-host",
    multiple=True,
    help="HTTP only: another name clients may reach this server by (Host/Origin header), e.g. "
    "ccweb.internal or ccweb.internal:8765. Repeatable. The loopback names are always allowed.",
)
@_limit_options
@click.pass_context
def serve(
    ctx: click.Context,
    sessions_dir: str,
    db: str | None,
    max_session_bytes: int,
    verbose: bool,
    source_session: str | None,
    no_watch: bool,
    poll: bool,
    transport: str,
    host: str | None,
    port: int | None,
    token_file: str | None,
    unix_socket: str | None,
    max_waits: int,
    allowed_host: tuple[str, ...],
    limits: dict[str, Any],
) -> None:
    """Serve the MCP tools over stdio (default) or as one shared Streamable HTTP server."""
    from ccweb_index.process import STOP_SIGNALS

    # Until each transport takes SIGTERM and SIGINT itself, nothing has been served: leave at once,
    # with status 0 (the SDK's import alone takes most of a second; the default actions are 143 and
    # a KeyboardInterrupt, which click prints as "Aborted!").
    previous = {signum: signal.signal(signum, _exit_before_serving) for signum in STOP_SIGNALS}
    if transport == "http":
        listen = _Listen(host, port, unix_socket, token_file, allowed_host, limits)
        try:
            _serve_http(ctx, sessions_dir, db, max_session_bytes, verbose, no_watch, poll, listen, max_waits)
        except click.ClickException:  # refused before serving: a caller in this process keeps its handlers
            _restore(previous)
            raise
        return
    _refuse_for_stdio(previous, host, port, token_file, unix_socket, allowed_host, limits)
    _serve_stdio(sessions_dir, db, max_session_bytes, verbose, source_session, no_watch, poll, max_waits)


def _refuse_for_stdio(
    previous: dict[signal.Signals, Any],
    host: str | None,
    port: int | None,
    token_file: str | None,
    unix_socket: str | None,
    allowed_host: tuple[str, ...],
    limits: dict[str, Any],
) -> None:
    http_only = [name for name, value in (("--host", host), ("--port", port), ("--token-file", token_file),
                                          ("--unix-socket", unix_socket), ("--allowed-host", allowed_host or None))
                 if value is not None]  # fmt: skip
    http_only += [option for option, field, _, _ in _LIMIT_OPTIONS if field in limits]
    if http_only:
        _restore(previous)
        raise click.UsageError(f"{', '.join(http_only)} only appl{'y' if len(http_only) > 1 else 'ies'} to --transport http")
    for fd, stream, use in ((0, "input", "reads its requests from it"), (1, "output", "answers over it")):
        if not _is_open(fd):  # the SDK's transport would end in a traceback
            _restore(previous)
            raise click.ClickException(f"standard {stream} is closed, and a stdio server {use}; "
                                       "give it a pipe, or use --transport http")  # fmt: skip


def _serve_stdio(
    sessions_dir: str,
    db: str | None,
    max_session_bytes: int,
    verbose: bool,
    source_session: str | None,
    no_watch: bool,
    poll: bool,
    max_waits: int,
) -> None:
    import anyio

    from ccweb_index.process import STOP_SIGNALS
    from ccweb_index.server.app import LazyService, serve_stdio
    from ccweb_index.server.stop import CLIENT_CLOSED_STDOUT, client_gone, stopping

    _setup_logging(verbose, quiet=logging.WARNING)  # stderr is the MCP client's log
    _warn_of_a_bad_source(source_session)

    budget = _parse_budget()  # here: the service is opened in another thread, outside click's context

    def open_service() -> Service:
        service = _open_service(
            sessions_dir, db, max_session_bytes, watch=not no_watch, poll=poll, parse_bytes_in_flight=budget
        )
        service.start_in_background()
        return service

    service: LazyService | None = None

    def stop_before_serving(*_: object) -> None:
        # Until the server runs (it then takes SIGTERM itself: server.stop), no call has been answered
        # and none is in flight: leave at once, the opening unfinished (SQLite rolls it back; the
        # index is a cache), as a SIGTERM during the opening does later.
        if service is not None:
            service.close(wait=False)
        logging.shutdown()
        os._exit(0)

    # Before the index begins to open: the thread below can be well into its first pass before the
    # next line returns, and a signal must not then take its default action.
    for signum in STOP_SIGNALS:
        signal.signal(signum, stop_before_serving)
    # The index is opened beside the server, not before it: `initialize` and `tools/list` are
    # answered at once; the first call waits for the index.
    service = LazyService(open_service)
    try:
        anyio.run(serve_stdio, service, source_session, max_waits)
    except BaseException as exc:
        # Stopping because the index could not be opened can break a write in flight (an answer to
        # `initialize`); the reason to report is the opening's, not the torn stream's. A client
        # that closed our stdout is gone: there is nobody to tell (it printed a BrokenPipeError
        # traceback into the agent's log, status 1).
        if service.error is None and not client_gone(exc):
            raise
        if service.error is None:
            stopping(CLIENT_CLOSED_STDOUT)
    finally:
        service.close()
    if service.error is not None:
        raise service.error


def _warn_of_a_bad_source(source: str | None) -> None:
    """Said once at start: each call that needs the source would only answer missing_source_conversation
    (an independent test started a server with the README's `<conversationId>` placeholder left in)."""
    from ccweb_index.indexer.sessionfile import is_valid_id

    if source is not None and not is_valid_id(source):
        shown = repr(source) if len(source) <= 80 else f"{source[:80]!r}..."
        logging.getLogger("ccweb_index").warning(
            "the source conversation %s (CCWEB_SOURCE_SESSION_ID or --source-session) is not a conversation "
            "id: calls that need it will answer missing_source_conversation", shown
        )


@dataclasses.dataclass(frozen=True)
class _Listen:
    """Where and how the HTTP server listens, as given on the command line."""

    host: str | None
    port: int | None
    unix_socket: str | None
    token_file: str | None
    allowed_host: tuple[str, ...]
    limits: dict[str, Any]


def _serve_http(
    ctx: click.Context,
    sessions_dir: str,
    db: str | None,
    max_session_bytes: int,
    verbose: bool,
    no_watch: bool,
    poll: bool,
    listen: _Listen,
    max_waits: int,
) -> None:
    from ccweb_index.server.http import (
        HttpOptions,
        StartupError,
        bind_sockets,
        bind_unix_socket,
        check_bind,
        serve_http,
    )
    from ccweb_index.server.limits import Limits

    _setup_logging(verbose)
    if ctx.get_parameter_source("source_session") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(
            "--source-session does not apply to --transport http: each client sends its conversation "
            "in the X-Ccweb-Source-Session header"
        )
    if listen.unix_socket is not None and (listen.host is not None or listen.port is not None):
        raise click.UsageError("--unix-socket replaces --host and --port: give one or the other")
    options = HttpOptions(
        host=listen.host or "127.0.0.1",
        port=8765 if listen.port is None else listen.port,
        allowed_hosts=listen.allowed_host,
        watch=not no_watch,
        verbose=verbose,
        unix_socket=listen.unix_socket,
        limits=Limits(**listen.limits),
        max_waits=max_waits,
    )
    _refuse_inside_sessions(sessions_dir, "--unix-socket", listen.unix_socket)
    try:
        options.token = _http_token(listen.token_file, sessions_dir, unix_socket=listen.unix_socket is not None)
        check_bind(options.host, options.token, options.unix_socket)  # refusals come before the index is opened
        if options.unix_socket is not None:
            sockets = [bind_unix_socket(options.unix_socket)]
        else:
            sockets = bind_sockets(options.host, options.port)
    except StartupError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        service = _open_service(sessions_dir, db, max_session_bytes, watch=options.watch, poll=poll)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    try:
        status = serve_http(service, options, sockets)
    except StartupError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(status)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _restore(handlers: dict[signal.Signals, Any]) -> None:
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def _exit_before_serving(*_: object) -> None:
    logging.shutdown()
    os._exit(0)


def _refuse_inside_sessions(sessions_dir: str, what: str, path: str | os.PathLike[str] | None) -> None:
    """A file the server would create (`what`) may no more be in the sessions directory than the
    index (`_refusing_db_inside_sessions`): a usage error, before anything is created."""
    from ccweb_index.indexer.private import inside_sessions

    where = None if path is None else inside_sessions(path, sessions_dir)
    if where is not None:
        raise click.UsageError(
            f"{what} {where} is inside the sessions directory {sessions_dir}, which is only ever read; "
            "choose a path outside it"
        )


def _http_token(token_file: str | None, sessions_dir: str, *, unix_socket: bool) -> str | None:
    """The configured token; else, on TCP, the default one (created on first use). A unix socket
    admits only this uid, so it needs no token unless one is configured."""
    from ccweb_index.server.credentials import TokenFileError, default_token, default_token_path
    from ccweb_index.server.http import TOKEN_ENV, load_token

    token = load_token(token_file)
    if token is not None or unix_socket:
        return token
    _refuse_inside_sessions(sessions_dir, "the default token file", default_token_path())
    try:
        token, path, created = default_token()
    except TokenFileError as exc:
        raise click.ClickException(f"{exc}; or set {TOKEN_ENV} or pass --token-file") from None
    log.info(
        "no token configured: clients must send the token %s %s (`ccweb-index token` prints it; "
        "e.g. export %s=\"$(ccweb-index token)\" where the MCP clients start)",
        "created in" if created else "kept in", path, TOKEN_ENV,
    )  # fmt: skip
    return token


@main.command()
def token() -> None:
    """Print the token `serve --transport http` uses when none is configured (creating it if needed).

    It lives in a private file under the user config directory; clients send it as
    `Authorization: Bearer <token>`.
    """
    from ccweb_index.server.credentials import TokenFileError, default_token

    try:
        value, _, _ = default_token()
    except TokenFileError as exc:
        raise click.ClickException(str(exc)) from None
    _say(value)


@main.command()
@click.argument("tool")
@click.argument("args_json", required=False, default="{}")
@_sessions_dir_option
@click.option(
    "--source-session",
    envvar="CCWEB_SOURCE_SESSION_ID",
    help="The conversation to answer for (env CCWEB_SOURCE_SESSION_ID).",
)
def call(
    tool: str,
    args_json: str,
    sessions_dir: str,
    db: str | None,
    max_session_bytes: int,
    verbose: bool,
    source_session: str | None,
) -> None:
    """Run one tool once, in-process, and print the JSON it returns (exit 1 on a tool error)."""
    from ccweb_index.server.unparsed import holds_lone_surrogate, parse_error_message

    _setup_logging(verbose, quiet=logging.WARNING)
    try:
        arguments = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"ARGS_JSON is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise click.UsageError("ARGS_JSON must be a JSON object, e.g. '{\"limit\": 5}'")
    if holds_lone_surrogate(arguments):  # refused as every transport refuses it (server/unparsed.py)
        raise click.UsageError(f"ARGS_JSON: {parse_error_message('', arguments)}")
    _require_dir(sessions_dir)  # else an empty answer, and an index made for a mistyped directory
    service = _open_service(sessions_dir, db, max_session_bytes)
    service.start()
    result = service.call(tool, arguments, source_session)
    service.close()
    _say(result.text().encode("utf-8"))
    sys.exit(1 if result.is_error else 0)


@main.command()
@_sessions_dir_option
def status(sessions_dir: str, db: str | None, max_session_bytes: int, verbose: bool) -> None:
    """Show what the index holds: counts, unreadable files and why, index path and size.

    Also lists the entries named like sessions that are not regular files (symlinks, FIFOs,
    devices, directories), which are never read. Run `build` first for an up-to-date picture when
    no watcher or server keeps the index current.
    """
    from ccweb_index.indexer.db import resolve_db_path

    _setup_logging(verbose)
    path = resolve_db_path(sessions_dir, db)
    try:
        exists = path.exists()
    except OSError as exc:  # a directory on the way this user cannot search
        raise click.ClickException(f"cannot look at the index {path}: {exc.strerror or exc}") from None
    if not exists:  # a look makes no index: one made here would belong to a mistyped directory
        missing = "" if os.path.isdir(sessions_dir) else " (missing)"
        _say(f"sessions directory: {os.path.abspath(sessions_dir)}{missing}")
        _say(f"index: none yet at {path}; `ccweb-index build` makes it (so do `serve` and `watch`)")
        return
    service = _open_service(sessions_dir, db, max_session_bytes)
    try:
        exists = os.path.isdir(service.sessions_dir)
        _say(f"sessions directory: {service.sessions_dir}" + ("" if exists else " (missing)"))
        try:
            counts = service.counts()
            unreadable = service.unreadable()
            stored_chars = service.stored_chars()
        except IndexFailure as exc:
            _say(f"index: {service.db_path} (cannot be read: {exc})")
            counts, unreadable = None, []
        if counts is not None:
            _echo_sizes(service.db_path)
            _say(f"stored of each user input: its first {stored_chars} code points, and its length")
            _say(f"last reconcile: {_when(counts['last_reconcile_ns'])}")
            _say(f"sessions: {counts['sessions']} readable, {counts['unreadable']} unreadable now")
            _say(f"user inputs: {counts['inputs']}")
        _echo_modes(service.db_path)
        for session_id, reason, good in unreadable:
            kept = " (answering from its last good version)" if good else ""
            _say(f"  unreadable {session_id}.json: {reason}{kept}")
        for name, kind in ignored_entries(service.sessions_dir):
            _say(f"  ignored {name}: {kind}, not a session")
    finally:
        service.close()


def _echo_sizes(db_path: Any) -> None:
    sizes = {suffix: _size(f"{db_path}{suffix}") for suffix in ("", "-wal", "-shm")}
    _say(f"index: {db_path} ({sum(sizes.values()) / 1e6:.1f} MB on disk with its -wal and -shm)")
    _say(f"index WAL: {sizes['-wal'] / 1e6:.1f} MB")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def _echo_modes(db_path: Any) -> None:
    from ccweb_index.indexer.private import modes

    for name, mode, fix in modes(db_path):
        _say(f"  mode {mode} {name}" + (f" (open to other users: {fix})" if fix else " (private)"))


def _when(ns: object) -> str:
    if not isinstance(ns, int):
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ns / 1e9))


if __name__ == "__main__":
    main()
