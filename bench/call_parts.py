"""Two parts of a conversations call, in-process: the freshness proof and the answer's text.

    python -m bench.call_parts SESSIONS_DIR --db INDEX

Starts `Service(..., watch=True)` on an existing index, answers `children_hot` once, then times, best
of 5 runs of 3,000: the watcher's cookie round trip, the check that makes it unnecessary when nothing
is pending (`InotifyWatcher.drained`), and the answer's JSON text by `json.dumps` and by the service
(`ToolResult.text`). Wall time and the calling thread's CPU time (the reader thread's is not in it),
in microseconds. SESSIONS_DIR needs its bench.gen_corpus `<dir>.summary.json` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path


def best_of(fn: Callable[[], object], calls: int = 3000, runs: int = 5) -> tuple[float, float]:
    """(wall, thread CPU) microseconds per call, of the run with the least wall time."""
    for _ in range(100):
        fn()
    results = []
    for _ in range(runs):
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(calls):
            fn()
        results.append(((time.perf_counter_ns() - wall) / calls / 1000, (time.thread_time_ns() - cpu) / calls / 1000))
    return min(results)


def main(argv: list[str] | None = None) -> int:
    from ccweb_index.indexer.watch import InotifyWatcher
    from ccweb_index.server.service import Service

    ap = argparse.ArgumentParser(prog="python -m bench.call_parts", description=__doc__.split("\n\n")[0])
    ap.add_argument("sessions_dir")
    ap.add_argument("--db", required=True)
    args = ap.parse_args(argv)
    summary = json.loads(Path(f"{os.path.normpath(args.sessions_dir)}.summary.json").read_text())
    service = Service(args.sessions_dir, args.db, watch=True)
    service.start()
    try:
        watcher = service.watcher
        if not isinstance(watcher, InotifyWatcher):
            sys.exit("no inotify watcher here: nothing to compare")
        result = service.call("ccweb_list_conversations", {"scope": "children"}, summary["hot_source"])
        parts = {
            "cookie round trip": watcher._cookie_round_trip,
            "drained check (no cookie)": watcher.drained,
            "answer text, json.dumps": lambda: json.dumps(result.payload, ensure_ascii=False, separators=(",", ":")),
            "answer text, ToolResult.text": result.text,
        }
        for name, fn in parts.items():
            wall, cpu = best_of(fn)
            print(f"{name:32s} wall {wall:7.1f} us   caller CPU {cpu:7.1f} us")
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
