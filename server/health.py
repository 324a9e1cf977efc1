"""/healthz and /metrics: whether the shared server can do its job, and (behind the token) why not.

Without the token, /healthz says only `{"ok": …}` with 200 or 503: when the user is active (counts,
lag, the time of the last reconcile) is nobody else's business. With the token, `/healthz?detail=1`
gives the whole document and `/metrics` the same figures in Prometheus' text format.

`ok` is false while the first indexing pass runs, and when the index cannot be read or written, the
watcher is down, or connections or calls are saturated (at their cap, or refused or evicted within
limits.SATURATION_WINDOW_SECONDS).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ccweb_index.server.limits import CallLimiter, Connections


@dataclass
class State:
    """What the server knows besides the index: the first pass, and the limits' counters."""

    ready: threading.Event = field(default_factory=threading.Event)
    start_failed: bool = False
    connections: Connections | None = None
    calls: CallLimiter | None = None
    nofile: int | None = None


def _iso(ns: object) -> str | None:
    if not isinstance(ns, int):
        return None
    when = datetime.fromtimestamp(ns / 1e9, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def watcher_lag(watcher: Any) -> tuple[float, int]:
    """(seconds since the oldest change the watcher saw and has not applied, changes pending)."""
    dirty = getattr(watcher, "dirty", None)
    return (0.0, 0) if dirty is None else dirty.lag()


def _counts(db_path: Any) -> dict[str, Any]:
    from ccweb_index.server import queries

    # A connection of its own, read-only: never waits for the service's lock or a writer.
    uri = f"file:{urllib.parse.quote(str(db_path))}?mode=ro"  # a path may hold '?', '#' or '%'
    conn = sqlite3.connect(uri, uri=True, timeout=2.0)
    try:
        return queries.counts(conn)
    finally:
        conn.close()


def unwritable(service: Any) -> str | None:
    """Why the index cannot be written now, or None. A write that failed (and none succeeded since)
    says so through the handle's fault; a full disk or a read-only place is seen before any write."""
    fault = getattr(service.handle, "fault", None)
    if fault:
        return str(fault)
    path = str(service.db_path)
    directory = os.path.dirname(path) or "."
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "the index or its directory is not writable"
    try:
        space = os.statvfs(directory)
    except OSError as exc:
        return f"cannot check the free space: {exc.strerror or exc}"
    if space.f_bavail == 0:
        return "no free space left on the index's filesystem"
    return None


def health(service: Any, state: State, watch: bool) -> dict[str, Any]:
    """The whole /healthz document: counts, lag and saturation, never a session's id, title or content."""
    doc: dict[str, Any] = {"ok": False, "status": "ready" if state.ready.is_set() else "starting"}
    try:
        counts: dict[str, Any] | None = _counts(service.db_path)
    except sqlite3.Error as exc:
        doc.update(status="index unavailable", error=type(exc).__name__)
        counts = None
    watcher = service.watcher
    running = bool(watcher is not None and watcher.running)
    lag, pending = watcher_lag(watcher) if running else (0.0, 0)
    doc["watcher"] = {"enabled": watch, "running": running, "lagSeconds": round(lag, 4), "pendingEvents": pending}
    if counts is not None:
        doc["sessions"] = counts["sessions"]
        doc["unreadable"] = counts["unreadable"]
        doc["lastReconcile"] = _iso(counts["last_reconcile_ns"])
    doc.update(_saturation(state))
    progress = service.progress()  # the first indexing pass, while it runs
    if progress is not None:
        doc["progress"] = progress
    if counts is not None and state.ready.is_set():
        problem = _problem(service, state, watch, running, doc)
        doc["ok"] = problem is None
        doc["status"] = problem or "ready"
    return doc


def _problem(service: Any, state: State, watch: bool, running: bool, doc: dict[str, Any]) -> str | None:
    if state.start_failed:
        return "initial indexing failed"
    if watch and not running:
        return "sessions directory missing" if not os.path.isdir(service.sessions_dir) else "watcher not running"
    cannot_write = unwritable(service)
    if cannot_write is not None:
        return f"index cannot be written: {cannot_write}"
    if state.connections is not None and state.connections.saturated():
        return "connections saturated"
    if state.calls is not None and state.calls.saturated():
        return "calls saturated"
    return None


def _saturation(state: State) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    connections, calls = state.connections, state.calls
    if connections is not None:
        doc["connections"] = {
            "open": len(connections.open), "max": connections.cap, "evicted": connections.evicted,
            "refused": connections.refused, "timedOut": connections.timed_out,
            "refusedPeers": connections.refused_peers, "saturated": connections.saturated(),
        }  # fmt: skip
    if calls is not None:
        doc["calls"] = {
            "inFlight": calls.count, "max": calls.total, "perClientMax": calls.per_client,
            "refused": calls.refused, "saturated": calls.saturated(),
        }  # fmt: skip
    if state.nofile is not None:
        doc["openFiles"] = {"open": _open_files(), "limit": state.nofile}
    return doc


def _open_files() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


# --- Prometheus -----------------------------------------------------------------------------------------


def metrics_text(doc: dict[str, Any]) -> bytes:
    """The detail document as Prometheus text exposition (with the process' own collector)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class FromDoc:
        def collect(self) -> Any:
            def gauge(name: str, help_text: str, value: Any) -> Any:
                return GaugeMetricFamily(f"ccweb_index_{name}", help_text, value=float(value or 0))

            def counter(name: str, help_text: str, value: Any) -> Any:
                return CounterMetricFamily(f"ccweb_index_{name}", help_text, value=float(value or 0))

            yield gauge("up", "1 when /healthz says ok", doc["ok"])
            yield gauge("sessions", "Readable sessions in the index", doc.get("sessions"))
            yield gauge("unreadable_sessions", "Session files unreadable now", doc.get("unreadable"))
            watcher = doc["watcher"]
            yield gauge("watcher_running", "1 while the watcher runs", watcher["running"])
            yield gauge("watcher_lag_seconds", "Age of the oldest change not yet indexed", watcher["lagSeconds"])
            yield gauge("watcher_pending_events", "Changes seen and not yet indexed", watcher["pendingEvents"])
            connections = doc.get("connections", {})
            yield gauge("connections_open", "Open HTTP connections", connections.get("open"))
            yield gauge("connections_max", "Connection cap (--max-connections, fitted to the descriptors)", connections.get("max"))
            yield counter("connections_evicted", "Idle connections closed to admit new ones", connections.get("evicted"))
            yield counter("connections_refused", "Connections refused with every slot busy", connections.get("refused"))
            yield counter("connections_timed_out", "Connections cut for not sending a request in time", connections.get("timedOut"))
            yield counter("unix_peers_refused", "Unix-socket connections from another uid", connections.get("refusedPeers"))
            calls = doc.get("calls", {})
            yield gauge("calls_in_flight", "Tool calls in progress", calls.get("inFlight"))
            yield gauge("calls_max", "Overall cap on calls in progress (--max-calls)", calls.get("max"))
            yield counter("calls_refused", "Calls refused by a cap", calls.get("refused"))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(FromDoc())
    ProcessCollector(registry=registry)
    return bytes(generate_latest(registry))
