"""The benchmark of issue 4, every measurement in one run: JSON plus a markdown report.

    python -m bench.run --sessions 10000 --small-sessions 100000 --corpus-dir /tmp/ccweb-bench-corpora
    python -m bench.run --quick          # a few hundred sessions, a few calls: the CI smoke scale

Run from the repository root with the project's virtualenv (`ccweb-index` is the one installed
beside this interpreter). Corpora come from `bench.gen_corpus` and are kept in `--corpus-dir` as
`s<N>-seed<S>-x<F>/` with a `<name>.summary.json` beside each; a corpus with the same parameters
whose files are all there is reused (any `*.summary.json` in that directory counts, so a corpus made
by hand with `python -m bench.gen_corpus ... > DIR.summary.json` is found too). Files the benchmark
rewrites (one ~20 MB session, the watcher-lag writes) are put back byte for byte afterwards.

Measurements, at `--sessions` (default 10,000 full-size) unless said otherwise:
  1. cold `ccweb-index build` (seconds, MB/s, peak RSS) and the one-thread parse floor, both warm;
  2. no-op rebuild, and re-index after the ~20 MB session changed, against that file's parse time;
  3. five tool cases, p50/p99 in-process (`Service(watch=True).call`) and over stdio (SDK client);
  4. the floor of a call: the same SDK answering a tool that does nothing, interleaved with 3;
  5. the rescan-per-call baseline for the hot source's children (median of `--rescan-calls`);
  6. watcher lag over HTTP (write in place -> on top of scope "all"), `--lag-writes` writes;
  7. build, no-op rebuild, in-process calls and memory at `--small-sessions` small sessions.
A step that fails is recorded in the JSON ("errors") and the run goes on.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from bench import report
from bench.common import (
    REPO,
    TIMING_SETTINGS,
    ccweb_index_command,
    clean_env,
    median,
    progress,
    python_module,
    read_all_files,
    run_measured,
)
from ccweb_index.indexer.files import RACY_WINDOW_NS

TOOL_INPUTS = "ccweb_list_user_inputs"
TOOL_CONVERSATIONS = "ccweb_list_conversations"
SCALES = ("main", "small")
# Files written less than the racy window before they are indexed are re-read later (racy).
RACY_WAIT_S = RACY_WINDOW_NS / 1e9 + 0.1
# `--baseline`: builds per checkout, alternating, for a before/after measured side by side.
BASELINE_ROUNDS = 2
# The no-op `build` command's figure is the median of this many runs: it lasts a second, and this
# VM's speed moves more than that within a minute (docs/decisions.md).
NOOP_COMMAND_RUNS = 5
# The product's source folders (the package `ccweb_index` beside its root modules).
PRODUCT_DIRS = ("indexer", "server", "migrations")


@dataclass
class Scale:
    key: str  # "main" or "small"
    sessions: int
    scale_bytes: float
    profile: str = "short"  # bench.gen_corpus.PROFILES
    corpus: Path | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    db: Path | None = None


@dataclass
class Run:
    args: argparse.Namespace
    work: Path
    out: dict[str, Any]
    scales: dict[str, Scale]

    def step(self, name: str, fn: Callable[[], dict[str, Any]]) -> None:
        """Run one measurement; store its result, or its error, under `steps[name]`; never raise."""
        if name.split("_")[0] in self.args.skip or name in self.args.skip:
            progress(f"{name}: skipped")
            return
        progress(f"{name}: start")
        started = time.perf_counter()
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - a failed step is recorded, the run goes on
            progress(f"{name}: FAILED: {exc!r}")
            self.out["errors"][name] = "".join(traceback.format_exception(exc))[-6000:]
            self.out["steps"][name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            return
        result["step_wall_s"] = time.perf_counter() - started
        self.out["steps"][name] = result
        progress(f"{name}: done in {result['step_wall_s']:.1f} s")

    def result(self, name: str) -> dict[str, Any]:
        value = self.out["steps"].get(name)
        if not isinstance(value, dict) or "error" in value:
            raise RuntimeError(f"needs the result of step {name!r}, which is missing or failed")
        return value


# --- the corpus ------------------------------------------------------------------------------------


def corpus_name(sessions: int, seed: int, scale_bytes: float, profile: str = "short") -> str:
    prefix = "" if profile == "short" else f"{profile}-"
    return f"{prefix}s{sessions}-seed{seed}-x{scale_bytes:g}"


def _corpus_is_whole(directory: Path, summary: dict[str, Any]) -> bool:
    files = total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
                files += 1
                total += entry.stat(follow_symlinks=False).st_size
    return files == summary.get("sessions") and total == summary.get("bytes")


def find_corpus(
    corpus_dir: Path, sessions: int, seed: int, scale_bytes: float, profile: str = "short"
) -> tuple[Path, dict[str, Any]] | None:
    if not corpus_dir.is_dir():
        return None
    for summary_path in sorted(corpus_dir.glob("*.summary.json")):
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(summary, dict):
            continue
        same = (
            summary.get("sessions"), summary.get("seed"), float(summary.get("scale_bytes", -1)),
            summary.get("profile", "short"),
        )  # fmt: skip
        if same != (sessions, seed, float(scale_bytes), profile):
            continue
        directory = summary_path.with_name(summary_path.name[: -len(".summary.json")])
        if directory.is_dir() and _corpus_is_whole(directory, summary):
            return directory, summary
    return None


def corpus_step(run: Run, scale: Scale) -> dict[str, Any]:
    """Reuse a corpus with the same parameters, or generate it."""
    from bench.gen_corpus import generate

    args = run.args
    corpus_dir = Path(args.corpus_dir)
    found = find_corpus(corpus_dir, scale.sessions, args.seed, scale.scale_bytes, scale.profile)
    generated_s = None
    if found is not None:
        scale.corpus, scale.summary = found
        progress(f"reusing the corpus {scale.corpus}")
    else:
        directory = corpus_dir / corpus_name(scale.sessions, args.seed, scale.scale_bytes, scale.profile)
        progress(f"generating {scale.sessions} {scale.profile} sessions (scale {scale.scale_bytes:g}) into {directory}")
        shutil.rmtree(directory, ignore_errors=True)
        started = time.perf_counter()
        summary = generate(directory, scale.sessions, args.seed, scale.scale_bytes, scale.profile)
        generated_s = time.perf_counter() - started
        # The summary is written last: a corpus without one is never reused.
        Path(f"{directory}.summary.json").write_text(json.dumps(summary) + "\n")
        scale.corpus, scale.summary = directory, summary
        time.sleep(RACY_WAIT_S)  # so that no file is still "racy" when the cold build reads it
    return {"path": str(scale.corpus), "generated_s": generated_s, "reused": found is not None, **scale.summary}


def warm_step(scale: Scale) -> dict[str, Any]:
    """Read every file once so the floor and the build both start with the corpus in the page cache."""
    assert scale.corpus is not None
    started = time.perf_counter()
    files, total = read_all_files(scale.corpus)
    return {"files": files, "bytes": total, "seconds": time.perf_counter() - started}


def changed_session(scale: Scale) -> str:
    """The session the changed-file measurement rewrites: the ~20 MB one, else the largest."""
    return scale.summary.get("big20") or scale.summary["largest"]


# --- 1. cold build and parse floor -------------------------------------------------------------------


def floor_step(run: Run, scale: Scale) -> dict[str, Any]:
    """The floor and parse_session over every file on one thread, no database (a child process, like the build)."""
    extra = ["--file", changed_session(scale)] if scale.key == "main" else []
    measured = run_measured(python_module("bench.parse_floor", str(scale.corpus), *extra), env=clean_env(), cwd=REPO)
    result = measured.check("bench.parse_floor").json_stdout()
    result["process_s"] = measured.seconds
    result["peak_rss_mb"] = measured.peak_rss_mb
    return result


def _index_mb(db: Path) -> float:
    return sum(os.path.getsize(p) for p in (f"{db}{s}" for s in ("", "-wal", "-shm")) if os.path.exists(p)) / 1e6


def _wal_mb(db: Path) -> float:
    """The index's WAL as it is now (0 when there is none): issue 12 bounds it once a build or server settles."""
    try:
        return os.path.getsize(f"{db}-wal") / 1e6
    except FileNotFoundError:
        return 0.0


def _build(scale: Scale, command: str | None = None, db: Path | None = None) -> Any:
    """`ccweb-index build` of this scale's corpus; `command` and `db`: another checkout's, into its own index."""
    assert scale.corpus is not None and scale.db is not None
    cmd = [command or ccweb_index_command(), "build", "--sessions-dir", str(scale.corpus), "--db", str(db or scale.db)]
    return run_measured(cmd, env=clean_env()).check("ccweb-index build")


def _fresh(db: Path) -> Path:
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return db


def _before_db(scale: Scale) -> Path:
    """The baseline's own index (`--baseline`): an older checkout may not read this one's schema."""
    assert scale.db is not None
    return scale.db.with_name(f"{scale.db.stem}-before{scale.db.suffix}")


def _side_by_side(run: Run, scale: Scale, cold: bool) -> dict[str, Any]:
    """`--baseline`: the same `build` by both checkouts, alternating (before first), BASELINE_ROUNDS times
    each; cold builds start from fresh indexes. Medians of both, so load from elsewhere hits both alike."""
    before_db, after_db = _before_db(scale), scale.db
    assert after_db is not None
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    rss: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(BASELINE_ROUNDS):
        for side, command, db in (("before", run.args.baseline, before_db), ("after", None, after_db)):
            measured = _build(scale, command, _fresh(db) if cold else db)
            seconds[side].append(measured.seconds)
            rss[side].append(measured.peak_rss_mb)
    result = {f"{side}_s": median(seconds[side]) for side in seconds}
    result.update({f"{side}_peak_rss_mb": max(rss[side]) for side in rss})
    result["after_over_before"] = result["after_s"] / result["before_s"]
    if cold:
        result.update(before_index_mb=_index_mb(before_db), after_index_mb=_index_mb(after_db))
    return result


def _reported(stderr: str) -> dict[str, Any]:
    """What `build` prints: sessions, inputs, files read, its own seconds."""
    found = re.search(
        r"(\d+) sessions, (\d+) user inputs, (\d+) unreadable; read (\d+) files, removed (\d+), in ([\d.]+) s", stderr
    )
    if not found:
        return {}
    sessions, inputs, unreadable, read, removed, seconds = found.groups()
    return {
        "sessions": int(sessions),
        "inputs": int(inputs),
        "unreadable": int(unreadable),
        "files_read": int(read),
        "removed": int(removed),
        "reported_s": float(seconds),
    }


def build_step(run: Run, scale: Scale) -> dict[str, Any]:
    """Cold `ccweb-index build` into a fresh index: wall seconds of the process, MB/s, peak RSS."""
    assert scale.corpus is not None
    scale.db = _fresh(run.work / f"{scale.key}.sqlite")
    measured = _build(scale)
    corpus_bytes = scale.summary["bytes"]
    result = {
        "seconds": measured.seconds,
        "mb_s": corpus_bytes / 1e6 / measured.seconds,
        "peak_rss_mb": measured.peak_rss_mb,
        "maxrss_single_process_mb": measured.maxrss_mb,
        "tree_peak_rss_mb": measured.tree_peak_rss_mb,
        "processes": measured.tree_max_processes,
        "index_mb": (index_mb := _index_mb(scale.db)),
        "index_over_corpus": index_mb * 1e6 / corpus_bytes,
        "wal_mb": _wal_mb(scale.db),
        **_reported(measured.stderr),
    }
    try:
        floor = run.result(f"floor_{scale.key}")
        result["floor_s"] = floor["floor_s"]
        result["build_over_floor"] = measured.seconds / floor["floor_s"]
        result["parse_s"] = floor["parse_s"]
        result["build_over_parse"] = measured.seconds / floor["parse_s"]
        result["build_over_skim"] = measured.seconds / floor["skim_s"]
    except RuntimeError:
        pass
    if result.get("files_read") != scale.summary["sessions"]:
        raise RuntimeError(f"the cold build read {result.get('files_read')} files, not {scale.summary['sessions']}")
    if run.args.baseline:
        result["side_by_side"] = _side_by_side(run, scale, cold=True)
    return result


# --- 2. rebuilds -------------------------------------------------------------------------------------


def _reconcile_in_process(scale: Scale, only: str | None = None) -> tuple[float, int]:
    """Seconds of one `Indexer.reconcile()` in this process (no interpreter start), and files it read.

    With `only`, `Indexer.refresh([only])` instead: that one file, as the watcher re-indexes it.
    """
    from ccweb_index.server.service import Service

    service = Service(str(scale.corpus), str(scale.db))
    try:
        started = time.perf_counter()
        stats = service.indexer.reconcile() if only is None else service.indexer.refresh([only])
        return time.perf_counter() - started, stats.read
    finally:
        service.close()


def _edit_in_place(path: Path, n: int) -> None:
    """A small change: a title edit and one more user message; rewritten in place (same inode)."""
    doc = msgspec.json.decode(path.read_bytes())
    doc["title"] = f"{doc.get('title') or ''} (edit {n})"
    messages = doc.get("messages")
    if isinstance(messages, list):
        messages.append(
            {
                "id": f"bench-edit-{n}",
                "role": "user",
                "content": f"再改一下 {n} ✅",
                "createdAt": "2100-01-01T00:00:00.000Z",
            }
        )
    with open(path, "r+b") as f:
        f.write(msgspec.json.encode(doc))
        f.truncate()


def rebuild_step(run: Run, scale: Scale) -> dict[str, Any]:
    """No-op rebuild, then one changed session re-indexed; both as the `build` command and in-process."""
    assert scale.corpus is not None
    noops = sorted((_build(scale) for _ in range(NOOP_COMMAND_RUNS)), key=lambda measured: measured.seconds)
    noop = noops[len(noops) // 2]
    noop_reported = _reported(noop.stderr)
    noop_s, noop_read = _reconcile_in_process(scale)
    result: dict[str, Any] = {
        "noop_command_s": noop.seconds,
        "noop_command_runs_s": [measured.seconds for measured in noops],
        "noop_command_reported_s": noop_reported.get("reported_s"),
        "noop_s": noop_s,
        "noop_files_read": noop_read,
        "noop_command_files_read": noop_reported.get("files_read"),
        "noop_wal_mb": _wal_mb(scale.db),
    }
    if run.args.baseline:
        result["side_by_side"] = _side_by_side(run, scale, cold=False)
    try:
        floor = run.result(f"floor_{scale.key}")
        result["noop_over_floor"] = noop_s / floor["floor_s"]
        result["noop_command_over_floor"] = noop.seconds / floor["floor_s"]
    except RuntimeError:
        pass
    if scale.key != "main":
        return result

    session_id = changed_session(scale)
    path = scale.corpus / f"{session_id}.json"
    original = path.read_bytes()
    try:
        _edit_in_place(path, 1)
        changed = _build(scale)
        changed_reported = _reported(changed.stderr)
        _edit_in_place(path, 2)
        changed_s, changed_read = _reconcile_in_process(scale)
        _edit_in_place(path, 3)
        refresh_s, refresh_read = _reconcile_in_process(scale, only=session_id)
    finally:
        with open(path, "r+b") as f:
            f.write(original)
            f.truncate()
    # Let the restored file settle before indexing it: an entry recorded within the racy window of the
    # file's ctime is "racy" and re-read at every look, which would slow the calls measured next.
    time.sleep(RACY_WAIT_S)
    _reconcile_in_process(scale)
    result.update(
        changed_session=session_id,
        changed_bytes=len(original),
        changed_command_s=changed.seconds,
        changed_command_reported_s=changed_reported.get("reported_s"),
        changed_command_files_read=changed_reported.get("files_read"),
        changed_s=changed_s,
        changed_files_read=changed_read,
        changed_refresh_s=refresh_s,
        changed_refresh_files_read=refresh_read,
    )
    try:
        parse_s = run.result(f"floor_{scale.key}")["file"]["median_s"]
        result["changed_parse_s"] = parse_s
        result["changed_over_parse"] = changed_s / parse_s
        result["changed_refresh_over_parse"] = refresh_s / parse_s
        result["changed_command_over_parse"] = changed.seconds / parse_s
    except (RuntimeError, KeyError):
        pass
    return result


# --- 3./4. tool calls ------------------------------------------------------------------------------


def tool_cases(scale: Scale) -> list[dict[str, Any]]:
    s = scale.summary
    hot, three = s["hot_source"], s["three_source"]
    return [
        {"name": "children_hot", "tool": TOOL_CONVERSATIONS, "args": {"scope": "children"}, "source": hot,
         "label": f"children of the hot source ({s.get('hot_children')} children), limit 20"},
        {"name": "children_three", "tool": TOOL_CONVERSATIONS, "args": {"scope": "children"}, "source": three,
         "label": "children of the source with 3 children"},
        {"name": "all_20", "tool": TOOL_CONVERSATIONS, "args": {"scope": "all", "limit": 20}, "source": hot,
         "label": "scope all, limit 20"},
        {"name": "inputs_small", "tool": TOOL_INPUTS, "args": {"conversationId": s["small"]}, "source": hot,
         "label": f"user inputs of a small session ({s.get('small_bytes', 0) / 1e3:.0f} KB)"},
        {"name": "inputs_largest", "tool": TOOL_INPUTS, "args": {"conversationId": s["largest"]}, "source": hot,
         "label": f"user inputs of the largest session ({s.get('largest_bytes', 0) / 1e6:.1f} MB)"},
    ]  # fmt: skip


def _check_answers(scale: Scale, cases: dict[str, Any]) -> None:
    s = scale.summary
    for name, case in cases.items():
        if case.get("is_error"):
            raise RuntimeError(f"{name} answered a tool error")
    expected = {
        "children_hot": min(20, s.get("hot_children") or 0),
        "children_three": 3,
        "all_20": min(20, s["sessions"]),
    }
    for name, count in expected.items():
        got = cases.get(name, {}).get("returnedCount")
        if got != count:
            raise RuntimeError(f"{name} returned {got} conversations, expected {count}")


def inprocess_step(run: Run, scale: Scale) -> dict[str, Any]:
    """The five cases through `Service(..., watch=True).call`, in a child process (its memory is a server's)."""
    cases = tool_cases(scale)
    plain = [{k: c[k] for k in ("name", "tool", "args", "source")} for c in cases]
    argv = python_module(
        "bench.inprocess", "--sessions-dir", str(scale.corpus), "--db", str(scale.db), "--cases", json.dumps(plain),
        "--calls", str(run.args.calls), "--round", str(run.args.round),
    )  # fmt: skip
    measured = run_measured(argv, env=clean_env(), cwd=REPO).check("bench.inprocess")
    result = measured.json_stdout()
    _check_answers(scale, result["cases"])
    for case in cases:
        result["cases"][case["name"]]["label"] = case["label"]
        result["cases"][case["name"]]["args"] = case["args"]
    return result


def stdio_step(run: Run, scale: Scale) -> dict[str, Any]:
    """The same cases over stdio with the SDK's ClientSession, interleaved with the empty-tool floor."""
    import anyio

    from bench import stdio_calls

    cases = tool_cases(scale)
    with open(run.work / "stdio-servers.log", "a", encoding="utf-8") as errlog:
        result = anyio.run(
            lambda: stdio_calls.measure(
                str(scale.corpus), str(scale.db), cases, calls=run.args.calls, per_round=run.args.round,
                warmup=20, errlog=errlog, work=run.work, baseline=run.args.baseline,
                baseline_db=str(_before_db(scale)) if run.args.baseline else None,
            )
        )  # fmt: skip
    _check_answers(scale, result["cases"])
    for case in cases:
        result["cases"][case["name"]]["label"] = case["label"]
        result["cases"][case["name"]]["args"] = case["args"]
    assert scale.db is not None
    result["wal_mb_after_servers"] = _wal_mb(scale.db)  # every server of the step has exited
    return result


# --- 5. the rescan baseline ------------------------------------------------------------------------


def rescan_step(run: Run, scale: Scale) -> dict[str, Any]:
    argv = python_module(
        "bench.rescan",
        str(scale.corpus),
        "--source",
        scale.summary["hot_source"],
        "--calls",
        str(run.args.rescan_calls),
    )
    measured = run_measured(argv, env=clean_env(), cwd=REPO).check("bench.rescan")
    result = measured.json_stdout()
    result["median_s"] = median(result["seconds"])
    result["peak_rss_mb"] = measured.peak_rss_mb
    for mode in ("inprocess", "stdio"):
        try:
            indexed = run.result(f"{mode}_{scale.key}")["cases"]["children_hot"]
        except (RuntimeError, KeyError):
            continue
        result[f"over_{mode}_p50"] = result["median_s"] / (indexed["p50_ms"] / 1000)
        if indexed.get("ids") is not None:
            result[f"same_answer_as_{mode}"] = indexed["ids"] == result["ids"]
    return result


# --- 6. watcher lag ----------------------------------------------------------------------------------


def watcher_lag_step(run: Run, scale: Scale) -> dict[str, Any]:
    from bench.watcher_lag import run_on

    assert scale.corpus is not None and scale.db is not None
    return run_on(scale.corpus, scale.db, run.work, writes=run.args.lag_writes, seed=run.args.seed)


# --- the machine -----------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        dirty = [line[3:] for line in git("status", "--porcelain").splitlines()]
        product = [f for f in dirty if f.split("/")[0] in (*PRODUCT_DIRS, "pyproject.toml")]
        return {"commit": git("rev-parse", "HEAD"), "dirty_files": dirty, "dirty_product_files": product}
    except (OSError, subprocess.SubprocessError):
        return {}


def product_digest() -> str:
    """A digest of the product's source as it is on disk now (to notice it changing during a run)."""
    import hashlib

    digest = hashlib.sha256()
    for top in PRODUCT_DIRS:
        for path in sorted((REPO / top).rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def compile_product() -> None:
    """Write the bytecode of this checkout's modules, as `pip install` does for an installed copy.
    An editable install run with PYTHONDONTWRITEBYTECODE would otherwise compile every module from
    source at each start of `ccweb-index`, a cost no installed copy (`--baseline`'s included) pays."""
    import compileall

    for top in PRODUCT_DIRS:
        compileall.compile_dir(str(REPO / top), quiet=1)
    for name in ("__init__.py", "__main__.py"):
        compileall.compile_file(str(REPO / name), quiet=1)


def _filesystem(path: Path) -> str | None:
    best, fstype = "", None
    try:
        real = os.path.realpath(path)
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) > len(best):
                        best, fstype = parts[1], parts[2]
    except OSError:
        pass
    return fstype


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "ram_gb": _mem_total_gb(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "msgspec": msgspec.__version__,
        "mcp": _version("mcp"),
        "watchdog": _version("watchdog"),
        "ccweb_index": _version("ccweb-index"),
        "filesystem": _filesystem(Path(args.corpus_dir)),
        "load_avg_at_start": list(os.getloadavg()),
    }


def reproduce_command(args: argparse.Namespace) -> str:
    parts = ["python", "-m", "bench.run"]
    if args.quick:
        parts.append("--quick")
    parts += [
        "--sessions", str(args.sessions), "--small-sessions", str(args.small_sessions),
        "--scale-bytes", f"{args.scale_bytes:g}", "--small-scale-bytes", f"{args.small_scale_bytes:g}",
        "--seed", str(args.seed), "--calls", str(args.calls), "--rescan-calls", str(args.rescan_calls),
        "--lag-writes", str(args.lag_writes), "--corpus-dir", str(args.corpus_dir), "--profile", args.profile,
    ]  # fmt: skip
    if args.baseline:
        parts += ["--baseline", args.baseline]
    return shlex.join(parts)


# --- driver ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-test scale: 300 + 1,000 sessions, 60 calls per case")
    ap.add_argument("--sessions", type=int, help="main corpus size (default 10000; quick 300)")
    ap.add_argument("--small-sessions", type=int, help="small-sessions corpus size (default 100000; quick 1000)")
    ap.add_argument("--scale-bytes", type=float, help="main corpus size factor (default 1.0; quick 0.05)")
    ap.add_argument("--small-scale-bytes", type=float, default=0.01, help="small corpus size factor (default 0.01)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--profile", choices=("short", "long", "both"), default="both",
        help="corpus profile: short inputs (issue 4), long pasted inputs (issue 12), or both (default)",
    )  # fmt: skip
    ap.add_argument("--calls", type=int, help="timed calls per tool case (default 1000; quick 60)")
    ap.add_argument("--round", type=int, default=50, help="calls per case per round when interleaving cases")
    ap.add_argument("--rescan-calls", type=int, default=3)
    ap.add_argument("--lag-writes", type=int, help="watcher-lag writes (default 200; quick 20)")
    ap.add_argument("--corpus-dir", default="/tmp/ccweb-bench-corpora", help="where corpora are kept and reused")
    ap.add_argument(
        "--out-dir", help="where benchmarks.json and benchmarks.md go (default docs/; quick: CORPUS_DIR/quick)"
    )
    ap.add_argument("--work-dir", help="indexes and logs (default: a temporary directory in CORPUS_DIR, removed after)")
    ap.add_argument(
        "--baseline", metavar="CCWEB_INDEX",
        help="another checkout's `ccweb-index` (e.g. the code before a change): its builds and stdio calls are "
        "measured side by side with this checkout's, each on its own index",
    )  # fmt: skip
    ap.add_argument(
        "--skip", default="",
        help="comma-separated steps or step groups to leave out, e.g. small,watcher (for development)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    quick = args.quick
    defaults = {
        "sessions": (10_000, 300), "small_sessions": (100_000, 1_000), "scale_bytes": (1.0, 0.05),
        "calls": (1000, 60), "lag_writes": (200, 20),
    }  # fmt: skip
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if quick:
        args.round = min(args.round, 20)
    if args.out_dir is None:
        args.out_dir = str(Path(args.corpus_dir) / "quick") if quick else str(REPO / "docs")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def run_profile(run: Run) -> None:
    """Every measurement of one corpus profile, at both scales."""
    run.work.mkdir(parents=True, exist_ok=True)
    main_scale, small = run.scales["main"], run.scales["small"]
    run.step("corpus_main", lambda: corpus_step(run, main_scale))
    if main_scale.corpus is not None:
        run.step("warm_main", lambda: warm_step(main_scale))
        run.step("floor_main", lambda: floor_step(run, main_scale))
        run.step("build_main", lambda: build_step(run, main_scale))
        run.step("rebuild_main", lambda: rebuild_step(run, main_scale))
        run.step("inprocess_main", lambda: inprocess_step(run, main_scale))
        run.step("stdio_main", lambda: stdio_step(run, main_scale))
        run.step("rescan_main", lambda: rescan_step(run, main_scale))
        run.step("watcher_main", lambda: watcher_lag_step(run, main_scale))
    if "small" not in run.args.skip:
        run.step("corpus_small", lambda: corpus_step(run, small))
        if small.corpus is not None:
            run.step("warm_small", lambda: warm_step(small))
            run.step("floor_small", lambda: floor_step(run, small))
            run.step("build_small", lambda: build_step(run, small))
            run.step("rebuild_small", lambda: rebuild_step(run, small))
            run.step("inprocess_small", lambda: inprocess_step(run, small))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.corpus_dir).mkdir(parents=True, exist_ok=True)
    keep_work = args.work_dir is not None
    work = Path(args.work_dir) if keep_work else Path(tempfile.mkdtemp(prefix="run-", dir=args.corpus_dir))
    work.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.UTC)
    out: dict[str, Any] = {
        "bench": "ccweb-index issues 4 and 12",
        "date": started.isoformat(timespec="seconds"),
        "command": reproduce_command(args),
        "argv": sys.argv[1:] if argv is None else argv,
        "machine": machine_info(args),
        "git": {**_git(), "product_digest_at_start": product_digest()},
        "config": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
        "timing_settings": {name: os.environ[name] for name in TIMING_SETTINGS if name in os.environ},
        "profiles": {},  # per corpus profile: steps, errors, targets, missing_figures
        "errors": {},
    }
    progress(f"work directory {work}; results to {args.out_dir}")
    compile_product()
    profiles = ("short", "long") if args.profile == "both" else (args.profile,)
    try:
        for profile in profiles:
            progress(f"--- profile {profile}")
            scales = {
                "main": Scale("main", args.sessions, args.scale_bytes, profile),
                "small": Scale("small", args.small_sessions, args.small_scale_bytes, profile),
            }
            profile_out: dict[str, Any] = out["profiles"].setdefault(profile, {"steps": {}, "errors": {}})
            run_profile(Run(args, work / profile, profile_out, scales))
    finally:
        out["machine"]["load_avg_at_end"] = list(os.getloadavg())
        out["git"]["product_digest_at_end"] = product_digest()
        if out["git"]["product_digest_at_end"] != out["git"]["product_digest_at_start"]:
            progress("warning: the product's source changed during the run")
        out["duration_s"] = (_dt.datetime.now(_dt.UTC) - started).total_seconds()
        for profile, profile_out in out["profiles"].items():
            profile_out["targets"] = report.targets(profile_out)
            profile_out["targets_12"] = report.targets_12(profile_out, profile)
            profile_out["missing_figures"] = report.missing_figures(profile_out)
            for line in profile_out["missing_figures"]:
                progress(f"missing ({profile}): {line}")
            out["errors"].update({f"{profile}/{k}": v for k, v in profile_out["errors"].items()})
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "benchmarks.json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
        report.write_markdown(out, out_dir / "benchmarks.md")
        progress(f"wrote {out_dir / 'benchmarks.json'} and {out_dir / 'benchmarks.md'}")
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
