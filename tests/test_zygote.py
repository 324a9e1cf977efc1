"""The tests' own way of starting servers (tests/zygote.py): what a client process sees through the
launcher is what it sees when it execs `ccweb-index`, and the launch is really forked (else the suite
would silently pay a full start for every interop server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zygote

from conftest import CCWEB_INDEX, Corpus, client_launch, server_pid, session, wait_until

pytestmark = pytest.mark.skipif(os.environ.get(zygote.START_ENV) == "exec", reason="forking is turned off")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_launch_ends_and_speaks_as_exec(tmp_path: Path) -> None:
    """Exit status, stdout and stderr of a forked start equal the exec'd command's."""
    assert CCWEB_INDEX is not None
    for args in (["--help"], ["no-such-command"]):
        launched = subprocess.run(client_launch(*args), capture_output=True, text=True, timeout=60)
        assert any(argv == [CCWEB_INDEX, *args] for _, argv in zygote.launched), "the launch was exec'd, not forked"
        # `executable` given: the worker's own launch is exec'd too (tests/zygote.py, install)
        execd = subprocess.run([CCWEB_INDEX, *args], executable=CCWEB_INDEX, capture_output=True, text=True, timeout=60)
        assert (launched.returncode, launched.stdout, launched.stderr) == (execd.returncode, execd.stdout, execd.stderr)


INITIALIZE = (
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", '
    b'"capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}\n'
)


def launched_server(corpus: Corpus, db: Path, sigterm_ignored: bool = False) -> tuple[subprocess.Popen[bytes], int]:
    corpus.write("a", session("hello"))
    command = client_launch("serve", "--sessions-dir", str(corpus.path), "--db", str(db))
    ignore = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if sigterm_ignored else None
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=ignore)
    assert wait_until(lambda: any(os.fsdecode(db) in argv for _, argv in zygote.launched), 30), "no server was forked"
    return proc, server_pid(db)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_a_signal_to_the_launcher_reaches_the_server(corpus: Corpus, tmp_path: Path, inherited: str) -> None:
    """Ignored by the launcher's launcher or not: the server takes SIGTERM itself, exec'd or forked."""
    proc, pid = launched_server(corpus, tmp_path / "index.sqlite", sigterm_ignored=inherited == "ignored")
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INITIALIZE)
    proc.stdin.flush()
    assert b'"serverInfo"' in proc.stdout.readline()  # it runs: its SIGTERM handler is set
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 0  # a stdio server's answer to SIGTERM (server/stop.py), passed on
    assert wait_until(lambda: gone(pid), 10)


def test_a_killed_launcher_takes_its_server_along(corpus: Corpus, tmp_path: Path) -> None:
    proc, pid = launched_server(corpus, tmp_path / "index.sqlite")
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert wait_until(lambda: gone(pid), 10)  # although its stdin is still open
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()


def test_the_launcher_ends_by_the_signal_that_ended_its_server(corpus: Corpus, tmp_path: Path) -> None:
    proc, pid = launched_server(corpus, tmp_path / "index.sqlite")
    os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()


PROBE = str(Path(__file__).resolve().parent / "zygote_probe.py")


@pytest.mark.parametrize("ending", ["0", "3", "raise", "end"])
def test_a_test_script_is_forked_and_runs_as_exec_runs_it(ending: str) -> None:
    """`python tests/SCRIPT ...` (the SDK client processes): the same `__name__`, `__file__`, argv,
    path, descriptors, streams and ending as the script exec'd."""
    forked = subprocess.run([sys.executable, PROBE, ending], input="hello", capture_output=True, text=True, timeout=60)
    assert any(argv == [sys.executable, PROBE, ending] for _, argv in zygote.scripts), "the script was exec'd, not forked"
    execd = subprocess.run([sys.executable, PROBE, ending], executable=sys.executable, input="hello",
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (forked.returncode, forked.stdout) == (execd.returncode, execd.stdout)
    assert forked.stdout.split()[0] == "__main__" and "HELLO" in forked.stdout
    # The script's module to the end; it keeps `__file__` only when it exits from inside (CPython).
    assert forked.stdout.endswith(f"at exit, __main__ is {'done' if ending in ('raise', 'end') else PROBE}\n")
    if ending == "raise":  # the traceback's frames differ (the zygote's), its end does not
        assert forked.stderr.endswith("RuntimeError: raised by the probe\n") and forked.returncode == 1
        assert execd.stderr.endswith("RuntimeError: raised by the probe\n")
    else:
        assert forked.stderr == execd.stderr == "on stderr\n"


def _limits_of_a_server_under(prefix: tuple[str, ...], corpus: Corpus, db: Path, **popen: object) -> list[str]:
    """The open-files and file-size lines of /proc/PID/limits of a stdio server started under `prefix`."""
    command = [*prefix, CCWEB_INDEX, "serve", "--sessions-dir", str(corpus.path), "--db", str(db)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)
    try:
        # Exec'd, the pid is the prefix's until it execs the command (and shows no command line while
        # an exec is under way); forked, it has the zygote's, with the limits taken before Popen returned.
        def past_the_prefix() -> bool:
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            return cmdline != b"" and b"setrlimit" not in cmdline

        assert wait_until(past_the_prefix)
        lines = Path(f"/proc/{proc.pid}/limits").read_text().splitlines()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    return [line for line in lines if line.startswith(("Max open files", "Max file size"))]


def test_a_server_under_rlimit_prefix_is_forked_with_the_limits_exec_gives(corpus: Corpus, tmp_path: Path) -> None:
    assert CCWEB_INDEX is not None
    # The open-files soft limit equal to the hard one: every command raises its soft limit to the
    # hard one first (ccweb_index/__main__.py), at a moment that differs between the two starts.
    prefix = zygote.rlimit_prefix(RLIMIT_NOFILE=(300, 300), RLIMIT_FSIZE=(10**9, 2 * 10**9))
    forked = _limits_of_a_server_under(prefix, corpus, tmp_path / "forked.sqlite")
    assert zygote.started[-1][1][:2] == [CCWEB_INDEX, "serve"], "the server was exec'd, not forked"
    # `executable` given: exec'd (tests/zygote.py, install), the prefix's interpreter setting the limits.
    execd = _limits_of_a_server_under(prefix, corpus, tmp_path / "execd.sqlite", executable=sys.executable)
    assert forked == execd and len(forked) == 2, (forked, execd)
    assert forked[0].split()[3:5] == ["1000000000", "2000000000"] and forked[1].split()[3:5] == ["300", "300"]
