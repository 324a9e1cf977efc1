"""What a `children` call costs without a caught-up watcher (issue 10, item 2).

    python -m bench.children_sweep SESSIONS_DIR [--calls 9] [--db PATH]

Builds the index (if needed), then times, in-process and with nothing changing:

- `call`: the whole `ccweb_list_conversations {"scope": "children"}` call of a service without a
  watcher (the stat sweep of every file: `Indexer.reconcile`, then the query);
- `sweep`: the sweep alone;
- `listing`: what the old, unsound check cost (the directory's signature, and a stat of each known
  child of the source), for comparison.

Prints one JSON object with the median and worst seconds of each. The source is the one with the
most MCP children in the corpus (bench.gen_corpus makes one with up to 500).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccweb_index.indexer.files import lstat_session
from ccweb_index.server.service import Service


def _timed(action: Callable[[], Any], calls: int) -> dict[str, float]:
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return {"median_s": round(statistics.median(seconds), 4), "worst_s": round(max(seconds), 4)}


def _busiest_source(service: Service) -> tuple[str, list[str]]:
    with service.handle.connection() as conn:
        source = conn.execute(
            "SELECT created_from_source FROM sessions WHERE created_from_kind = 'mcp' AND good = 1 "
            "GROUP BY created_from_source ORDER BY COUNT(*) DESC LIMIT 1"
        ).fetchone()[0]
        children = [r[0] for r in conn.execute(
            "SELECT id FROM sessions WHERE created_from_source = ? AND created_from_kind = 'mcp'", (source,)
        )]  # fmt: skip
    return source, children


def measure(sessions_dir: str, db: Path, calls: int) -> dict[str, Any]:
    service = Service(sessions_dir, db)
    try:
        started = time.perf_counter()
        service.start()
        build = time.perf_counter() - started
        source, children = _busiest_source(service)

        def call() -> None:
            result = service.call("ccweb_list_conversations", {"scope": "children", "limit": 20}, source)
            assert not result.is_error, result.payload

        def old_check() -> None:
            os.stat(sessions_dir)
            for child in children:
                lstat_session(sessions_dir, child)

        with service.handle.connection() as conn:
            sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        return {
            "sessions": sessions,
            "children_of_source": len(children),
            "build_s": round(build, 2),
            "call": _timed(call, calls),
            "sweep": _timed(service.indexer.reconcile, calls),
            "listing": _timed(old_check, calls),
        }
    finally:
        service.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.children_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions_dir")
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--db", type=Path, help="index file (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        db = args.db or Path(scratch) / "index.sqlite"
        print(json.dumps(measure(args.sessions_dir, db, args.calls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
