"""Load (issue #5), small enough for every run: clients over HTTP and stdio, with and without a watcher,
while a writer rewrites sessions 100 times a second; every answer is checked against what a
from-scratch computation during the call could give (tests/loadtest.py explains why that is sound).

The full run (8 clients x 1,000 calls, 100 sessions) is `python -m bench.load`; its figures are in
docs/reliability.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import loadtest
from conftest import THOROUGH, client_launch
from loadtest import CONVERSATIONS, INPUTS, LoadSpec, Oracle, Timeline, check_call

CALLS = 150 if THOROUGH else 60  # per client


@pytest.mark.slow
def test_concurrent_clients_under_rewrites_get_only_right_answers(tmp_path: Path) -> None:
    report = loadtest.run(
        # All servers on one index, as issue #3 deploys them (bench/load.py can also give each its own).
        LoadSpec(sessions=30, clients=4, calls=CALLS, rate=100, http_clients=2, stdio_no_watch=1, warmup=5,
                 launch=tuple(client_launch())),
        tmp_path,
    )
    assert report["problems"] == [], "\n".join(report["problems"][:10])
    assert report["wrong_answers"] == 0 and report["calls"] == 4 * CALLS
    assert report["writes"] > 0 and report["in_place_writes"] > 0
    print(f"\nsmall load run: {report['calls']} calls, {report['writes']} writes in {report['seconds']} s; "
          f"latency {report['latency_ms']}")  # fmt: skip


def test_the_oracle_rejects_what_no_moment_of_the_call_had(tmp_path: Path) -> None:
    """The check must fail when the behaviour breaks: stale, future and torn answers are refused."""
    ids = loadtest.session_ids(6)
    oracle = Oracle(ids, tmp_path / "placeholders")
    timeline = Timeline()
    for session_id in ids:
        timeline.writes[session_id].append((-math.inf, -math.inf, 0, "initial"))
    target = ids[4]
    timeline.writes[target].append((10.0, 10.1, 2, "atomic"))  # v0 -> v2, done before the call
    timeline.writes[target].append((30.0, 30.1, 3, "inplace"))  # v2 -> v3, after the call
    source = loadtest.SOURCES[0]

    def inputs(version: int) -> dict:
        return oracle.inputs(target, version, {"conversationId": target}, source)[0]

    call = [INPUTS, {"conversationId": target}, 20.0, 21.0]
    assert check_call(oracle, timeline, source, [*call, inputs(2), False]) is None
    assert check_call(oracle, timeline, source, [*call, inputs(0), False]) is not None, "stale"
    assert check_call(oracle, timeline, source, [*call, inputs(3), False]) is not None, "from the future"
    # During the atomic write: old or new; during the in-place one: any earlier version too.
    assert check_call(oracle, timeline, source, [INPUTS, {"conversationId": target}, 10.05, 10.06, inputs(0), False]) is None
    assert check_call(oracle, timeline, source, [INPUTS, {"conversationId": target}, 30.05, 30.06, inputs(0), False]) is None
    assert check_call(oracle, timeline, source, [INPUTS, {"conversationId": target}, 10.05, 10.06, inputs(1), False]) is not None

    all_now = oracle.conversations({s: (2 if s == target else 0) for s in ids}, {}, source)[0]
    all_before = oracle.conversations({s: 0 for s in ids}, {}, source)[0]
    assert all_now != all_before
    assert check_call(oracle, timeline, source, [CONVERSATIONS, {}, 20.0, 21.0, all_now, False]) is None
    assert check_call(oracle, timeline, source, [CONVERSATIONS, {}, 20.0, 21.0, all_before, False]) is not None
    assert check_call(oracle, timeline, source, [CONVERSATIONS, {}, 20.0, 21.0, all_now, True]) is not None


def test_the_exact_check_agrees_with_trying_every_combination(tmp_path: Path) -> None:
    """The linear check used for list_conversations decides exactly what enumerating every
    combination of versions decides (on small random cases, including wrong answers)."""
    import itertools
    import random

    ids = loadtest.session_ids(7)
    oracle = Oracle(ids, tmp_path / "placeholders")
    rng = random.Random(3)
    argument_sets = [{}, {"limit": 2}, {"limit": 3, "agent": "claude"}, {"scope": "children"}, {"status": "idle", "limit": 1}]
    verdicts = {True: 0, False: 0}
    for _ in range(300):
        choices = {s: sorted(rng.sample(range(loadtest.VERSIONS), rng.choice([1, 1, 2, 3]))) for s in ids}
        arguments = rng.choice(argument_sets)
        source = rng.choice(loadtest.SOURCES)
        # A candidate answer: right for some state (possibly outside the choices), sometimes altered.
        state = {s: rng.randrange(loadtest.VERSIONS) for s in ids}
        payload = oracle.conversations(state, arguments, source)[0]
        if rng.random() < 0.2 and payload["conversations"]:
            payload = {**payload, "hasMore": not payload["hasMore"]}
        brute = any(
            oracle.conversations(dict(zip(ids, picks, strict=True)), arguments, source) == (payload, False)
            for picks in itertools.product(*(choices[s] for s in ids))
        )
        assert (oracle.conversations_possible(choices, arguments, source, payload) is None) == brute, (choices, arguments, payload)
        verdicts[brute] += 1
    assert verdicts[True] > 20 and verdicts[False] > 20
