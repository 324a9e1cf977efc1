"""Profile a cold build and a stdio tool call with py-spy, and print the hotspots.

    pip install py-spy          # into the venv; not a project dependency
    python -m bench.profile build SESSIONS_DIR [--out DIR]
    python -m bench.profile stdio SESSIONS_DIR --db INDEX [--case children_hot] [--calls 3000] [--out DIR]

`build`: reads every file once (warm cache, as bench.run does), then records `ccweb-index build` into
a fresh index with `py-spy record --subprocesses` (the build's worker processes included).
`stdio`: starts `ccweb-index serve` on an existing index through the SDK's stdio client, as
bench.run does, and records the server process with py-spy while the client makes `--calls` calls
of one case; the client (this process) is recorded too, by a second py-spy. SESSIONS_DIR must be a
corpus made by bench.gen_corpus with its `<dir>.summary.json` beside it (for the case's ids).
The raw profiles (collapsed stacks; flamegraph.pl or speedscope read them) are kept in `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ccweb_index_command, clean_env, progress, read_all_files
from bench.hotspots import render


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(found):
        sys.exit("py-spy is not installed: pip install py-spy")
    return found


def profile_build(sessions_dir: str, out: Path, rate: int, keep_db: str | None) -> None:
    progress("warming the page cache")
    read_all_files(sessions_dir)
    with tempfile.TemporaryDirectory(prefix="ccweb-profile-") as tmp:
        db = Path(keep_db or Path(tmp) / "index.sqlite")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        raw = out / "build.raw"
        # --nonblocking: py-spy's default (pausing the processes to sample them) made the build's
        # pickle stream from a worker unreadable (UnicodeDecodeError in pickle.load) every time we tried.
        cmd = [
            _py_spy(),
            "record",
            "--nonblocking",
            "--subprocesses",
            "-r",
            str(rate),
            "-f",
            "raw",
            "-o",
            str(raw),
            "--",
        ]
        cmd += [ccweb_index_command(), "build", "--sessions-dir", sessions_dir, "--db", str(db)]
        progress("recording: " + " ".join(cmd))
        subprocess.run(cmd, check=True, env=clean_env())
    print(render(str(raw), 30))
    print()
    print(render(str(raw), 30, under="reconcile"))


async def _stdio_calls(sessions_dir: str, db: str, case: dict[str, Any], calls: int, out: Path, rate: int) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    from bench.stdio_calls import _children_of_self, product_server

    params = product_server(sessions_dir, db, case.get("source"))
    before = _children_of_self()
    with open(out / "stdio-server.log", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            (pid,) = _children_of_self() - before
            await session.initialize()
            await session.list_tools()
            for _ in range(50):
                await session.call_tool(case["tool"], case["args"])
            spies = [
                subprocess.Popen(
                    [
                        _py_spy(),
                        "record",
                        "--gil",
                        "-r",
                        str(rate),
                        "-f",
                        "raw",
                        "-o",
                        str(out / f"stdio-{who}.raw"),
                        "--pid",
                        str(p),
                    ],
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
                for who, p in (("server", pid), ("client", os.getpid()))
            ]
            time.sleep(1.0)  # py-spy attaches
            started = time.perf_counter()
            for _ in range(calls):
                await session.call_tool(case["tool"], case["args"])
            elapsed = time.perf_counter() - started
            for spy in spies:
                spy.send_signal(signal.SIGINT)
            for spy in spies:
                spy.wait(timeout=60)
    progress(f"{calls} calls in {elapsed:.2f} s ({elapsed / calls * 1000:.3f} ms per call, under the profilers)")


def profile_stdio(sessions_dir: str, db: str, case_name: str, calls: int, out: Path, rate: int) -> None:
    import anyio

    from bench.run import Scale, tool_cases

    summary = json.loads(Path(f"{os.path.normpath(sessions_dir)}.summary.json").read_text())
    scale = Scale(
        "main", summary["sessions"], summary["scale_bytes"], summary.get("profile", "short"), Path(sessions_dir), summary,
        Path(db),
    )  # fmt: skip
    case = next(c for c in tool_cases(scale) if c["name"] == case_name)
    anyio.run(_stdio_calls, sessions_dir, db, case, calls, out, rate)
    print(render(str(out / "stdio-server.raw"), 30))
    print()
    print(render(str(out / "stdio-client.raw"), 30))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build")
    b.add_argument("sessions_dir")
    b.add_argument("--db", help="build this index (kept) instead of a temporary one")
    s = sub.add_parser("stdio")
    s.add_argument("sessions_dir")
    s.add_argument("--db", required=True)
    s.add_argument("--case", default="children_hot")
    s.add_argument("--calls", type=int, default=3000)
    for p in (b, s):
        p.add_argument("--out", default="/tmp/ccweb-profile")
        p.add_argument("--rate", type=int, default=250, help="samples per second")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "build":
        profile_build(args.sessions_dir, out, args.rate, args.db)
    else:
        profile_stdio(args.sessions_dir, args.db, args.case, args.calls, out, args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
