"""The parse floor: read and decode every session file on one thread, with no database.

    python -m bench.parse_floor SESSIONS_DIR [--file ID --repeat 5]

Three passes over the same files, in name order, each timed on its own:

- `read`: open + read every file, nothing else (the I/O part; the page cache is expected warm);
- `parse_session`: read + `indexer.sessionfile.parse_session`, the decoder the indexer uses (this
  is "the floor" the build is compared with);
- `skim`: read + a bare msgspec decode of the top-level fields and each message's role and times,
  message bodies skipped and no UTF-8 check of them: the fastest decode of the same facts.

With `--file ID`, also the median read + parse_session time of that one file over `--repeat` runs.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import msgspec

from ccweb_index.indexer.sessionfile import Unreadable, parse_session, session_id_from_name


class _SkimMessage(msgspec.Struct):
    role: Any = None
    createdAt: Any = None
    timestamp: Any = None


class _SkimDocument(msgspec.Struct):
    title: Any = None
    agent: Any = None
    status: Any = None
    createdAt: Any = None
    updatedAt: Any = None
    createdFrom: Any = None
    messages: list[_SkimMessage] | None = None


_skim = msgspec.json.Decoder(_SkimDocument)


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read()


def session_paths(directory: str) -> list[str]:
    names = sorted(e.name for e in os.scandir(directory) if e.is_file(follow_symlinks=False))
    return [os.path.join(directory, n) for n in names if session_id_from_name(n) is not None]


def read_pass(paths: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    total = 0
    for path in paths:
        total += len(_read(path))
    return time.perf_counter() - started, total


def parse_pass(paths: list[str]) -> tuple[float, int, int]:
    started = time.perf_counter()
    total = unreadable = 0
    for path in paths:
        data = _read(path)
        total += len(data)
        try:
            parse_session(data)
        except Unreadable:
            unreadable += 1
    return time.perf_counter() - started, total, unreadable


def skim_pass(paths: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    total = 0
    for path in paths:
        data = _read(path)
        total += len(data)
        try:
            _skim.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
    return time.perf_counter() - started, total


def one_file(path: str, repeat: int) -> dict[str, Any]:
    times = []
    size = 0
    for _ in range(repeat):
        started = time.perf_counter()
        data = _read(path)
        parse_session(data)
        times.append(time.perf_counter() - started)
        size = len(data)
    times.sort()
    return {"bytes": size, "repeat": repeat, "median_s": times[len(times) // 2], "min_s": times[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.parse_floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("sessions_dir")
    ap.add_argument("--file", help="also time read + parse_session of this one session id")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only-file", action="store_true", help="skip the passes over the whole directory")
    args = ap.parse_args(argv)

    result: dict[str, Any] = {"threads": 1}
    if not args.only_file:
        paths = session_paths(args.sessions_dir)
        read_s, read_bytes = read_pass(paths)
        parse_s, parse_bytes, unreadable = parse_pass(paths)
        skim_s, _ = skim_pass(paths)
        mb = parse_bytes / 1e6
        result.update(
            files=len(paths),
            bytes=parse_bytes,
            unreadable=unreadable,
            read_s=read_s,
            read_mb_s=read_bytes / 1e6 / read_s,
            parse_s=parse_s,
            parse_mb_s=mb / parse_s,
            skim_s=skim_s,
            skim_mb_s=mb / skim_s,
        )
    if args.file:
        result["file"] = one_file(os.path.join(args.sessions_dir, args.file + ".json"), args.repeat)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
