"""Honest health (issue #11 item 5): nothing but `ok` without the token; `ok` false when the index
cannot be written, the watcher is down or the server is saturated (the saturation cases are in
tests/test_http_limits.py)."""

from __future__ import annotations

import resource
import shutil
import time
from pathlib import Path
from typing import Any

import httpx2
from prometheus_client.parser import text_string_to_metric_families
from test_http import (
    LIST_INPUTS,
    TOKEN,
    http_client_for,
    http_server,
    start_http_server,
    stop,
    write_two_families,
)

from conftest import Corpus, session
from faults import rlimit_prefix

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def wait_for(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_without_the_token_only_ok(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """Before: counts, lastReconcile, lag and pending events for anyone local (when is the user
    active?). Now `{"ok": …}` alone, unless the request carries the token and asks for detail."""
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN) as server:
        for params, headers in (({}, {}), ({"detail": "1"}, {}), ({"detail": "1"}, {"Authorization": "Bearer wrong"}),
                                ({}, AUTH), ({"detail": "0"}, AUTH)):  # fmt: skip
            response = server.healthz(params=params, headers=headers)
            assert (response.status_code, response.json()) == (200, {"ok": True}), (params, headers)
        doc = server.detail().json()
        assert doc["ok"] is True and doc["status"] == "ready" and doc["sessions"] == 6
        assert {"watcher", "lastReconcile", "connections", "calls", "openFiles"} <= set(doc)
        assert httpx2.get(f"{server.base}/metrics", timeout=10).status_code == 401
        metrics = httpx2.get(f"{server.base}/metrics", headers=AUTH, timeout=10)
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
        samples = {s.name: s.value for family in text_string_to_metric_families(metrics.text) for s in family.samples}
        assert samples["ccweb_index_up"] == 1 and samples["ccweb_index_sessions"] == 6
        assert samples["ccweb_index_connections_max"] == doc["connections"]["max"]
        assert samples["process_open_fds"] > 0 and samples["process_resident_memory_bytes"] > 0


def test_ok_is_false_while_the_index_cannot_be_written(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the index's writes fail as a full disk would (tests/test_broken_index.py):
    before, /healthz said ok while the index was stuck. Now 503 until a write goes through again."""
    corpus = Corpus(tmp_path / "sessions")
    write_two_families(corpus)
    for n in range(40):  # more text than the index can take within the limit
        corpus.write(f"bulk{n}", session(*[f"bulk{n} {k} " + "x" * 2000 for k in range(8)], updated="2026-09-01T00:00:00Z"))
    db = tmp_path / "index" / "index.sqlite"
    server = start_http_server(corpus.path, db, tmp_path / "log", token=TOKEN, prefix=rlimit_prefix(256 * 1024), healthy=False)
    try:
        wait_for(lambda: server.detail().json()["status"].startswith("index cannot be written"))
        response = server.healthz()
        assert (response.status_code, response.json()) == (503, {"ok": False})
        resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        corpus.write("orchA", session("plan A", "room again", updated="2026-12-01T00:00:00Z"))

        def answered_from_the_index() -> bool:
            # A fault ends when a write goes through; the watcher's own writes do not end it
            # (indexer/handle.py), a call's do: the call brings orchA's new version into the index.
            with http_client_for(server.url, source="orchA") as client:
                payload, _ = client.call(LIST_INPUTS)
            assert [i["content"] for i in payload["inputs"]] == ["plan A", "room again"]
            return server.healthz().status_code == 200

        wait_for(answered_from_the_index)
        assert server.detail().json()["status"] == "ready"
    finally:
        stop(server)


def test_ok_is_false_while_the_watcher_is_down(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN) as server:
        shutil.rmtree(corpus.path)
        wait_for(lambda: server.healthz().status_code == 503)
        assert server.healthz().json() == {"ok": False}
        assert server.detail().json()["status"] == "sessions directory missing"
        write_two_families(Corpus(corpus.path))
        wait_for(lambda: server.healthz().status_code == 200)


def test_the_first_passs_progress_is_reported_when_the_service_has_one(corpus: Corpus, db_path: Path) -> None:
    from ccweb_index.server.health import State, health
    from ccweb_index.server.service import Service

    write_two_families(corpus)
    service = Service(corpus.path, db_path)
    try:
        state = State()
        assert "progress" not in health(service, state, watch=False)
        service.progress = lambda: {"done": 3, "total": 6}  # type: ignore[method-assign]  # a pass under way
        doc = health(service, state, watch=False)
        assert doc["progress"] == {"done": 3, "total": 6} and doc["status"] == "starting" and doc["ok"] is False
        service.start()
        state.ready.set()
        assert health(service, state, watch=False)["ok"] is True
    finally:
        service.close()
