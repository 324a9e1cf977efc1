"""The shared server's token when none is configured: one generated into a private file, kept.

`serve --transport http` without `--token-file` or `CCWEB_INDEX_TOKEN` uses the token in
`<user config dir>/ccweb-index/token`, creating it (random, 0600, in a 0700 directory) the first time.
The same user's clients read it there (`ccweb-index token` prints it); it survives restarts, so a
client configured once keeps working. See docs/decisions.md, "A credential by default".
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from ccweb_index.indexer.private import OTHERS, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_umask

log = logging.getLogger("ccweb_index")

APP_NAME = "ccweb-index"
TOKEN_FILE_NAME = "token"
TOKEN_BYTES = 32  # of randomness, before URL-safe base64
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class TokenFileError(Exception):
    """The default token file cannot be read or created; the message names it."""


def default_token_path() -> Path:
    from platformdirs import user_config_path

    return user_config_path(APP_NAME) / TOKEN_FILE_NAME


def default_token() -> tuple[str, Path, bool]:
    """(the token, its file, whether it was created now). An existing file open to others is tightened."""
    from ccweb_index.server.http import StartupError, checked_token, judge_token_file

    path = default_token_path()
    try:
        created = _create(path)
        with open(path, encoding="ascii") as f:
            st = os.fstat(f.fileno())
            # Its token may be known to others who could read it; it stays, as the clients have it.
            if st.st_uid == os.geteuid() and st.st_mode & OTHERS and not st.st_mode & _WRITABLE_BY_OTHERS:
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) & ~OTHERS)
                log.warning("the token file %s was readable by other users; made it private", path)
            else:  # another user's (a config directory others can write), or one others can write
                judge_token_file(path, st, renew="delete it to have a new token made")
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read or create the token file {path}: {exc}") from None
    except StartupError as exc:
        raise TokenFileError(str(exc)) from None
    if not token:
        raise TokenFileError(f"the token file {path} is empty; delete it to have a new token made")
    try:  # a file the user may have edited by hand: the rule --token-file and CCWEB_INDEX_TOKEN follow
        checked_token(token, f"the token file {path}")
    except StartupError as exc:
        raise TokenFileError(str(exc)) from None
    return token, path, created


def _create(path: Path) -> bool:
    """Put a new random token at `path` unless a file is there; True when this call put it. Written
    aside and linked in, so that no reader ever sees the file empty."""
    if path.exists():
        return False
    with private_umask():
        path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
        os.link(aside, path)
    except FileExistsError:
        return False  # another process was first: use its token
    finally:
        aside.unlink(missing_ok=True)
    return True
