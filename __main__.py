"""`ccweb-index` (the console script) and `python -m ccweb_index`: what runs before the command's
modules are imported.

Importing them (click, then each command's own: the MCP SDK, sqlite-utils, uvicorn) takes a few
hundred milliseconds, and two things cannot wait that long:

- **A stop signal.** Claude Code ends its servers with SIGINT and then SIGTERM, whenever the user
  quits, even just after it launched them. Until a command takes the signals itself, Python's
  defaults answered: a KeyboardInterrupt traceback in the agent's log, or death by SIGTERM (status
  143). Here the process leaves at once, quietly. For the commands a signal is the normal end of
  (`serve`, `watch`), with 0, nothing having been served or indexed yet, until the command puts its
  own handlers in place (after its own imports and checks). For the others, with 128 + the signal's
  number, as a shell reports a command it interrupted, until the commands' modules are imported;
  then Python's defaults again (click says "Aborted!" for SIGINT, exit 1). A signal the caller
  ignores (SIGINT, for a command a non-interactive shell starts with `&`) stays ignored here.
- **The open-files limit.** Its soft value is raised to the hard one, as Go's runtime does: a soft
  limit of a dozen, where thousands were allowed, ended a stdio server in a traceback. Where even
  the hard limit is too low, running out of descriptors ends the command in one line.

What it imports before its handlers are in place is the standard library's `os`, `signal`,
`resource` and `sys`, through one module of ours (`ccweb_index.process`) that imports nothing else.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import Any, NoReturn

from ccweb_index.process import OUT_OF_DESCRIPTORS, STOP_SIGNALS, leaves, out_of_descriptors, raise_nofile

# The commands that run until a signal ends them.
_ENDED_BY_SIGNAL = ("serve", "watch")


def main() -> None:
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, _leave_before_running)
    raise_nofile()
    try:
        from ccweb_index.server.cli import main as command
    except OSError as exc:
        _leave_if_out_of_descriptors(exc)
        raise
    if not _ended_by_signal():  # their own handling from here; `serve` and `watch` put theirs in place
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    try:
        command()
    except BaseException as exc:  # what is neither of these goes on up
        _leave_if_out_of_descriptors(exc)
        _leave_if_stdout_failed(exc)
        raise


def _ended_by_signal() -> bool:
    return bool(sys.argv[1:2]) and sys.argv[1] in _ENDED_BY_SIGNAL


def _leave_before_running(signum: int, _frame: Any) -> NoReturn:
    # Not sys.exit: it would be raised inside whatever import is under way, which may catch it.
    os._exit(0 if _ended_by_signal() else 128 + signum)


def _leave_if_out_of_descriptors(exc: BaseException) -> None:
    """One line instead of a traceback when `exc` is, or holds, a shortage of descriptors: what
    follows from one (a failing close in the event loop's teardown) comes with it."""
    short = [leaf for leaf in leaves(exc) if isinstance(leaf, OSError) and leaf.errno in OUT_OF_DESCRIPTORS]
    if not short:
        return
    print(f"ccweb-index: {out_of_descriptors(short[0].errno)}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


def _leave_if_stdout_failed(exc: BaseException) -> None:
    """One line, as the commands' own output says it (server.cli `_say`), when click's `--help` or
    `--version` could not be written to stdout (a full disk): click writes those itself, and the
    OSError ended in its traceback. Told by where it was raised: click's `echo`, writing to stdout.
    A closed pipe stays a quiet exit."""
    if not isinstance(exc, OSError) or exc.errno == errno.EPIPE or exc.__traceback__ is None:
        return
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame
    if frame.f_code.co_name != "echo" or frame.f_locals.get("file") not in (sys.stdout, sys.stdout.buffer):
        return
    # What is still buffered would fail again as the interpreter exits, with a traceback.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    print(f"Error: cannot write to standard output: {exc.strerror or exc}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


if __name__ == "__main__":
    main()
