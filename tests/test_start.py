"""What `ccweb-index` does before a command's modules are imported (ccweb_index.__main__): the open-files
limit. Its signals are in tests/test_stdio_sigterm.py."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zygote

from ccweb_index.indexer import files
from ccweb_index.server.service import Service

from conftest import CCWEB_INDEX, Corpus, server_pid, session, stdio_client_for
from faults import clean_env


def test_the_entry_imports_only_the_standard_library() -> None:
    """Whatever it imports is imported before it can take a signal: nothing slow to import."""
    code = "import sys, json; before = set(sys.modules); import ccweb_index.__main__; print(json.dumps(sorted(set(sys.modules) - before)))"
    modules = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    ours = {name for name in modules if name.split(".")[0] == "ccweb_index"}
    others = {name for name in modules if name.split(".")[0] not in sys.stdlib_module_names} - ours
    assert ours == {"ccweb_index", "ccweb_index.__main__", "ccweb_index.process"}
    assert not others, others
    # What the limits' and the stop's modules brought in before the handlers (an independent review:
    # 33 ms more, and a SIGINT 38 ms after the start still met a traceback in `import logging`).
    slow = {"logging", "socket", "threading", "dataclasses", "inspect", "contextlib"}
    assert not slow & set(modules), slow & set(modules)


def test_a_low_soft_limit_is_raised_to_the_hard_one(corpus: Corpus, db_path: Path) -> None:
    """A stdio server under a soft limit of 10, with thousands allowed, used to end in a traceback
    (found by an independent test)."""
    corpus.write("w1", session("hello"))
    prefix = zygote.rlimit_prefix(RLIMIT_NOFILE=(10, 4096))
    with stdio_client_for(corpus.path, db_path, source="w1", prefix=prefix) as client:
        payload, is_error = client.call("ccweb_list_user_inputs")
        assert not is_error and [item["content"] for item in payload["inputs"]] == ["hello"]
        limits = Path(f"/proc/{server_pid(db_path)}/limits").read_text()
        assert re.search(r"Max open files\s+4096\s+4096", limits), limits


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_too_few_descriptors_end_the_command_in_one_line(tmp_path: Path, corpus: Corpus) -> None:
    """Where the hard limit itself is too low, a stdio server ended in a traceback of its event loop."""
    corpus.write("w1", session("hello"))
    command = ["prlimit", "--nofile=8:8", CCWEB_INDEX, "serve", "--sessions-dir", str(corpus.path),
               "--db", str(tmp_path / "i.sqlite")]  # fmt: skip
    done = subprocess.run(command, input=b"", capture_output=True, env=clean_env(), timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("ccweb-index: out of file descriptors (the open-files limit is 8)"), err


def test_a_directory_unreadable_for_want_of_descriptors_says_so(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Out of descriptors when the first pass opens the sessions directory: the log named the
    directory, "cannot be read (Too many open files)", as if its permissions were wrong (found at a
    hard limit of 10 under `watch`). It says what is short, and how to raise the limit."""
    corpus.write("w1", session("hello"))

    @contextlib.contextmanager
    def out_of_descriptors(sessions_dir: str) -> Iterator[int]:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), sessions_dir)
        yield 0  # a generator, as the real one is

    monkeypatch.setattr(files, "_listed", out_of_descriptors)
    caplog.set_level(logging.WARNING, logger="ccweb_index")
    service = Service(corpus.path, db_path, watch=False)
    try:
        service.start()
        answer = service.call("ccweb_list_conversations", {}, None)
    finally:
        service.close()
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    short = (
        f"out of file descriptors (the open-files limit is {limit}): raise it, e.g. "
        f"`ulimit -n {max(1024, 2 * limit)}` in the shell or LimitNOFILE= in systemd"
    )
    said = [r.getMessage() for r in caplog.records if str(corpus.path) in r.getMessage()]
    assert said == [f"the sessions directory {corpus.path} cannot be read now: {short}"], caplog.text
    # The caller is told the same, not "(Too many open files)" as if the directory were at fault.
    assert answer.is_error and answer.payload["error"] == {
        "code": "sessions_directory_unreadable",
        "message": f"The sessions directory cannot be read ({short}); nothing can be answered until it can. Try again later.",
    }, answer.payload
