"""The parse floor: read and decode every session file on one thread, with no database.

    python -m bench.parse_floor SESSIONS_DIR [--file ID --repeat 5]

Passes over the same files, in name order, each timed on its own:

- `read`: open + read every file, nothing else (the I/O part; the page cache is expected warm);
- `floor` (issue 12): read + check that the whole file is UTF-8 + a msgspec decode into this
  module's own structs, which skip every message body except user messages' content. It is
  independent of the product's decoder, so it does not move when the product does: this is the
  floor the build is compared with;
- `parse_session`: read + `indexer.sessionfile.parse_session`, the decoder the indexer uses;
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
from typing import Any, Generic, TypeVar

import msgspec

from ccweb_index.indexer.sessionfile import Unreadable, parse_session, session_id_from_name


class _SkimMessage(msgspec.Struct):
    role: Any = None
    createdAt: Any = None
    timestamp: Any = None


class _FloorMessage(_SkimMessage):
    content: msgspec.Raw = msgspec.Raw(b"null")  # left undecoded unless the message is the user's
    id: Any = None


M = TypeVar("M")


class _Document(msgspec.Struct, Generic[M]):
    title: Any = None
    agent: Any = None
    status: Any = None
    createdAt: Any = None
    updatedAt: Any = None
    createdFrom: Any = None
    messages: list[M] | None = None


_skim = msgspec.json.Decoder(_Document[_SkimMessage])


class _FloorBlock(msgspec.Struct):
    type: Any = None
    text: Any = None  # a block's other fields (a tool result's body) are skipped


_floor = msgspec.json.Decoder(_Document[_FloorMessage])
_content = msgspec.json.Decoder(str | list[_FloorBlock] | None)
_any = msgspec.json.Decoder()


def floor_decode(data: bytes) -> int:
    """The floor's work on one file: UTF-8 check of all of it, then the decode. Returns user messages."""
    if not data.isascii():  # ASCII is UTF-8; else Python's decoder is the check
        data.decode("utf-8")
    doc = _floor.decode(data)
    users = 0
    for message in doc.messages or ():
        if message.role == "user":
            try:
                _content.decode(message.content)
            except msgspec.ValidationError:  # content of another shape: decoded whole
                _any.decode(message.content)
            users += 1
    return users


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


def _decode_pass(paths: list[str], decode: Any, failures: tuple[type[Exception], ...]) -> tuple[float, int, int]:
    """(seconds, bytes, files `decode` refused): read and decode each file, one core, no database."""
    started = time.perf_counter()
    total = unreadable = 0
    for path in paths:
        data = _read(path)
        total += len(data)
        try:
            decode(data)
        except failures:
            unreadable += 1
    return time.perf_counter() - started, total, unreadable


def parse_pass(paths: list[str]) -> tuple[float, int, int]:
    return _decode_pass(paths, parse_session, (Unreadable,))


def floor_pass(paths: list[str]) -> tuple[float, int, int]:
    return _decode_pass(paths, floor_decode, (UnicodeDecodeError, msgspec.DecodeError, msgspec.ValidationError))


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
        floor_s, _, floor_unreadable = floor_pass(paths)
        parse_s, parse_bytes, unreadable = parse_pass(paths)
        skim_s, _ = skim_pass(paths)
        mb = parse_bytes / 1e6
        result.update(
            files=len(paths),
            bytes=parse_bytes,
            unreadable=unreadable,
            read_s=read_s,
            read_mb_s=read_bytes / 1e6 / read_s,
            floor_s=floor_s,
            floor_mb_s=mb / floor_s,
            floor_unreadable=floor_unreadable,
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
