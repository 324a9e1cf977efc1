"""What a process of ours takes before the modules of its command are imported: the signals that
stop it, as many open files as it is allowed, and what to say when they run out (the indexer's
words for a file it cannot read now use it too). The console script's entry (`__main__`) imports
this module first, so it imports nothing at its top but the standard library's `errno`, `signal`
and `resource`: every module imported before the entry's handlers are in place widens the window in
which a stop signal meets Python's default (a traceback, or death by SIGTERM)."""

from __future__ import annotations

import errno
import resource
import signal
from collections.abc import Iterator

# The signals that end a server; both are taken as SIGTERM is (server.stop). SIGINT comes first
# when Claude Code exits, then SIGTERM a tenth of a second later.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def raise_nofile() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as Go's runtime does; returns the soft limit
    now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            import logging

            logging.getLogger("ccweb_index").warning(
                "cannot raise the open-files limit from %d to %d: %s", soft, hard, exc
            )
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def out_of_descriptors(number: int | None = errno.EMFILE) -> str:
    """What to say when the process (EMFILE) or the whole system (ENFILE) ran out of file
    descriptors: the limit, and how to raise it."""
    if number == errno.ENFILE:
        return "the system is out of file descriptors (its open-files table is full: see fs.file-max)"
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"out of file descriptors (the open-files limit is {soft}): raise it, "
        f"e.g. `ulimit -n {max(1024, 2 * soft)}` in the shell or LimitNOFILE= in systemd"
    )


def why_not(exc: OSError) -> str:
    """Why `exc` happened, in words: for a shortage of descriptors the limit and how to raise it,
    which the error's own "Too many open files" does not say."""
    if exc.errno in OUT_OF_DESCRIPTORS:
        return out_of_descriptors(exc.errno)
    return exc.strerror or str(exc)


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions in `exc`, and in the groups within it, that are not groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc
