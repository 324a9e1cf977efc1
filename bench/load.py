"""The load test of issue #5, full size: 8 concurrent clients x 1,000 calls while a writer rewrites 100
sessions per second (atomic and in-place writes mixed), every answer checked.

    python -m bench.load [--clients 8] [--calls 1000] [--sessions 100] [--rate 100] [--http-clients 5]
                         [--write-mode mixed|atomic|inplace|truncate|append] [--no-watch]

Prints one JSON report (see tests/loadtest.py for the method and why the check is sound): calls,
wrong answers, problems, write rate, latency by transport, and the servers' RSS at the start (after
warm-up) and the end. Exits 1 if any call failed or any answer was wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from loadtest import WRITE_MODES, LoadSpec, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0, help="writes per second")
    parser.add_argument("--http-clients", type=int, default=5, help="the others use stdio, each with its own server")
    parser.add_argument("--stdio-no-watch", type=int, default=1, help="stdio servers started with --no-watch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--index-per-process", action="store_true",
                        help="give each stdio server its own index (default: all servers share one)")
    parser.add_argument("--write-mode", choices=WRITE_MODES, default="mixed",
                        help="how the writer writes: atomic rename, in place, truncate-then-write, append, or "
                             "mixed (atomic or in place at random)")
    parser.add_argument("--no-watch", action="store_true", help="no server has a watcher (the HTTP one included)")
    parser.add_argument("--workdir", type=Path, help="keep the corpus, logs and answers here")
    args = parser.parse_args()
    spec = LoadSpec(sessions=args.sessions, clients=args.clients, calls=args.calls, rate=args.rate,
                    http_clients=args.http_clients, stdio_no_watch=args.stdio_no_watch, seed=args.seed,
                    shared_index=not args.index_per_process, write_mode=args.write_mode, no_watch=args.no_watch)  # fmt: skip
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    report = run(spec, args.workdir)
    report["problems"] = report["problems"][:50]
    print(json.dumps(report, indent=2))
    return 1 if report["problems"] or report["wrong_answers"] else 0


if __name__ == "__main__":
    sys.exit(main())
