"""The `ccweb-index` command: small click commands over the indexer and the service."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import click

from ccweb_index.indexer.errors import IndexFailure, IndexInsideSessions, IndexMismatch
from ccweb_index.indexer.files import DEFAULT_MAX_SESSION_BYTES, ignored_entries
from ccweb_index.server.tools import DEFAULT_MAX_WAITS

if TYPE_CHECKING:
    from ccweb_index.server.service import Service

# The service (SQLite, sqlite-utils, the indexer) and the MCP SDK are imported by the commands that
# use them: `serve` answers `initialize` before it opens the index (docs/decisions.md).

log = logging.getLogger("ccweb_index")


def _setup_logging(verbose: bool) -> None:
    # stdout is the MCP channel for `serve`; every log line goes to stderr.
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.INFO,
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
    func = click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")(func)
    return func


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
        return command(*args, **kwargs)

    return checked


def _open_service(sessions_dir: str, db: str | None, max_session_bytes: int, **kwargs: Any) -> Service:
    from ccweb_index.server.service import Service

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


@click.group()
@click.version_option(package_name="ccweb-index")
def main() -> None:
    """Index cc-web session files in SQLite and answer cc-web's MCP tools from the index."""


@main.command()
@_sessions_dir_option
def build(sessions_dir: str, db: str | None, max_session_bytes: int, verbose: bool) -> None:
    """Bring the index in line with the sessions directory, then exit.

    Incremental: files whose stat signature did not change are not read.
    """
    _setup_logging(verbose)
    _require_dir(sessions_dir)
    service = _open_service(sessions_dir, db, max_session_bytes)
    try:
        _require_index(service)
        started = time.perf_counter()
        try:
            if sys.stderr.isatty():
                with click.progressbar(length=1, label="indexing", file=sys.stderr) as bar:

                    def progress(done: int, total: int) -> None:
                        bar.length = total
                        bar.update(done - bar.pos)

                    stats = service.indexer.reconcile(progress=progress)
            else:
                stats = service.indexer.reconcile()
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


@main.command()
@_sessions_dir_option
@click.option("--poll", is_flag=True, help="Poll the directory instead of using inotify (e.g. network filesystems).")
def watch(sessions_dir: str, db: str | None, max_session_bytes: int, verbose: bool, poll: bool) -> None:
    """Build, then keep the index in line with the directory until SIGINT/SIGTERM.

    If the directory is removed, renamed or replaced while watched, the new one at the path is
    watched when it appears.
    """
    _setup_logging(verbose)
    _require_dir(sessions_dir)
    service = _open_service(sessions_dir, db, max_session_bytes, watch=True, poll=poll)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        service.start()
        log.info("watching %s (index %s)", service.sessions_dir, service.db_path)
        stop.wait()
    finally:
        service.close()
    log.info("stopped")


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
    help="HTTP only: file holding the bearer token clients must send (else env CCWEB_INDEX_TOKEN). "
    "Required to listen on a non-loopback address.",
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
    max_waits: int,
    allowed_host: tuple[str, ...],
) -> None:
    """Serve the MCP tools over stdio (default) or as one shared Streamable HTTP server."""
    if transport == "http":
        _serve_http(
            ctx, sessions_dir, db, max_session_bytes, verbose, no_watch, poll, host, port, token_file, max_waits, allowed_host
        )
        return
    http_only = [name for name, value in (("--host", host), ("--port", port), ("--token-file", token_file),
                                          ("--allowed-host", allowed_host or None)) if value is not None]  # fmt: skip
    if http_only:
        raise click.UsageError(f"{', '.join(http_only)} only apply to --transport http")

    import anyio

    from ccweb_index.server.app import LazyService, serve_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s ccweb-index %(levelname)s %(message)s")  # fmt: skip

    def open_service() -> Service:
        service = _open_service(sessions_dir, db, max_session_bytes, watch=not no_watch, poll=poll)
        service.start_in_background()
        return service

    # The index is opened beside the server, not before it: `initialize` and `tools/list` are
    # answered at once; the first call waits for the index.
    service = LazyService(open_service)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        anyio.run(serve_stdio, service, source_session, max_waits)
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
    if service.error is not None:
        raise service.error


def _serve_http(
    ctx: click.Context,
    sessions_dir: str,
    db: str | None,
    max_session_bytes: int,
    verbose: bool,
    no_watch: bool,
    poll: bool,
    host: str | None,
    port: int | None,
    token_file: str | None,
    max_waits: int,
    allowed_host: tuple[str, ...],
) -> None:
    from ccweb_index.server.http import (
        HttpOptions,
        StartupError,
        bind_sockets,
        check_bind,
        load_token,
        serve_http,
    )

    _setup_logging(verbose)
    if ctx.get_parameter_source("source_session") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(
            "--source-session does not apply to --transport http: each client sends its conversation "
            "in the X-Ccweb-Source-Session header"
        )
    options = HttpOptions(
        host=host or "127.0.0.1",
        port=8765 if port is None else port,
        allowed_hosts=allowed_host,
        watch=not no_watch,
        verbose=verbose,
        max_waits=max_waits,
    )
    try:
        options.token = load_token(token_file)
        check_bind(options.host, options.token)  # refusals come before the index is even opened
        sockets = bind_sockets(options.host, options.port)
    except StartupError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        service = _open_service(sessions_dir, db, max_session_bytes, watch=options.watch, poll=poll)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    sys.exit(serve_http(service, options, sockets))


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
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.WARNING)
    try:
        arguments = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"ARGS_JSON is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise click.UsageError("ARGS_JSON must be a JSON object, e.g. '{\"limit\": 5}'")
    service = _open_service(sessions_dir, db, max_session_bytes)
    service.start()
    result = service.call(tool, arguments, source_session)
    service.close()
    click.echo(result.text())
    sys.exit(1 if result.is_error else 0)


@main.command()
@_sessions_dir_option
def status(sessions_dir: str, db: str | None, max_session_bytes: int, verbose: bool) -> None:
    """Show what the index holds: counts, unreadable files and why, index path and size.

    Also lists the entries named like sessions that are not regular files (symlinks, FIFOs,
    devices, directories), which are never read. Run `build` first for an up-to-date picture when
    no watcher or server keeps the index current.
    """
    _setup_logging(verbose)
    service = _open_service(sessions_dir, db, max_session_bytes)
    try:
        exists = os.path.isdir(service.sessions_dir)
        click.echo(f"sessions directory: {service.sessions_dir}" + ("" if exists else " (missing)"))
        size = sum(os.path.getsize(p) for p in (f"{service.db_path}{s}" for s in ("", "-wal")) if os.path.exists(p))
        try:
            counts = service.counts()
            unreadable = service.unreadable()
        except IndexFailure as exc:
            click.echo(f"index: {service.db_path} (cannot be read: {exc})")
            counts, unreadable = None, []
        if counts is not None:
            click.echo(f"index: {service.db_path} ({size / 1e6:.1f} MB)")
            click.echo(f"last reconcile: {_when(counts['last_reconcile_ns'])}")
            click.echo(f"sessions: {counts['sessions']} readable, {counts['unreadable']} unreadable now")
            click.echo(f"user inputs: {counts['inputs']}")
        _echo_modes(service.db_path)
        for session_id, reason, good in unreadable:
            kept = " (answering from its last good version)" if good else ""
            click.echo(f"  unreadable {session_id}.json: {reason}{kept}")
        for name, kind in ignored_entries(service.sessions_dir):
            click.echo(f"  ignored {name}: {kind}, not a session")
    finally:
        service.close()


def _echo_modes(db_path: Any) -> None:
    from ccweb_index.indexer.private import modes

    for name, mode, fix in modes(db_path):
        click.echo(f"  mode {mode} {name}" + (f" (open to other users: {fix})" if fix else " (private)"))


def _when(ns: object) -> str:
    if not isinstance(ns, int):
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ns / 1e9))


if __name__ == "__main__":
    main()
