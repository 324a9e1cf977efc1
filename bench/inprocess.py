"""Tool calls in-process: `Service(..., watch=True)`, then `service.call(...)` in a loop, no transport.

    python -m bench.inprocess --sessions-dir D --db DB --cases CASES_JSON [--calls 1000] [--round 50]

Every call goes through the service's whole code path, freshness checks included (the watcher's
cookie round trip for the conversation list, one lstat of the file for user inputs). The cases are
interleaved in rounds of `--round` calls, so a burst of load from elsewhere on the machine hits
every case alike. Runs in its own process so its memory figures are those of a serving process:
RSS after start and peak RSS. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from bench.common import latency_summary, proc_status_mb


def measure(
    sessions_dir: str, db: str, cases: list[dict[str, Any]], calls: int, per_round: int, warmup: int
) -> dict[str, Any]:
    from ccweb_index.server.service import Service

    before = proc_status_mb()
    started = time.perf_counter()
    service = Service(sessions_dir, db, watch=True)
    service.start()
    start_s = time.perf_counter() - started
    after_start = proc_status_mb()
    try:
        watcher = type(service.watcher).__name__ if service.watcher is not None else None
        samples: dict[str, list[float]] = {case["name"]: [] for case in cases}
        answers: dict[str, Any] = {}
        for case in cases:
            for _ in range(max(1, warmup)):
                result = service.call(case["tool"], case["args"], case.get("source"))
            answers[case["name"]] = result
        clock = time.perf_counter
        done = 0
        while done < calls:
            n = min(per_round, calls - done)
            for case in cases:
                name, args, source, tool = case["name"], case["args"], case.get("source"), case["tool"]
                out = samples[name]
                call = service.call
                for _ in range(n):
                    t0 = clock()
                    call(tool, args, source)
                    out.append(clock() - t0)
            done += n
        results = {}
        for case in cases:
            answer = answers[case["name"]]
            payload = answer.payload
            results[case["name"]] = {
                **latency_summary(samples[case["name"]]),
                "is_error": answer.is_error,
                "returnedCount": payload.get("returnedCount"),
                "ids": [row["conversationId"] for row in payload.get("conversations", [])] or None,
            }
    finally:
        service.close()
    end = proc_status_mb()
    return {
        "watcher": watcher,
        "start_s": start_s,
        "cases": results,
        "memory": {
            "rss_before_start_mb": before["rss_mb"],
            "rss_after_start_mb": after_start["rss_mb"],
            "rss_after_calls_mb": end["rss_mb"],
            "peak_rss_mb": end["peak_rss_mb"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions-dir", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--cases", required=True, help="JSON list of {name, tool, args, source}")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--round", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args(argv)
    result = measure(args.sessions_dir, args.db, json.loads(args.cases), args.calls, args.round, args.warmup)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
