"""Both tools' contracts through a real MCP client session over stdio, against the installed command.

Answers are compared with tests/reference.py, a small rescan-per-call implementation written from the
specification alone, on a corpus that exercises every rule of issue #2.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reference
from conftest import Corpus, StdioClient, memory_client_for, session, snapshot, stdio_client_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sessions"
SOURCE = "orchestrator"


def same_answer(actual: tuple[dict[str, Any], bool], expected: tuple[dict[str, Any], bool]) -> None:
    """The same answer. A cursor is opaque: only whether there is one is compared (tests that page
    follow each implementation's own cursors)."""
    payload, is_error = actual
    want, want_error = expected
    assert is_error == want_error, (payload, want)
    if is_error:
        assert payload["error"]["code"] == want["error"]["code"]
        assert isinstance(payload["error"]["message"], str) and len(payload["error"]["message"]) > 20
    else:
        payload, want = without_cursor(payload), without_cursor(want)
        assert payload == want, "\n".join(differences(payload, want))


def without_cursor(payload: dict[str, Any]) -> dict[str, Any]:
    if "nextCursor" not in payload:
        return payload
    cursor = payload["nextCursor"]
    assert cursor is None or (isinstance(cursor, str) and cursor), cursor
    return {**payload, "nextCursor": cursor is not None}


def differences(actual: Any, expected: Any, where: str = "") -> list[str]:
    """Where two JSON values differ, as readable lines (pytest's diff truncates nested answers)."""
    if isinstance(actual, dict) and isinstance(expected, dict):
        return [line for key in sorted(set(actual) | set(expected), key=str)
                for line in differences(actual.get(key, "<missing>"), expected.get(key, "<missing>"), f"{where}.{key}")]
    if isinstance(actual, list) and isinstance(expected, list) and len(actual) == len(expected):
        return [line for n, (a, e) in enumerate(zip(actual, expected)) for line in differences(a, e, f"{where}[{n}]")]
    return [] if actual == expected else [f"{where}: got {actual!r}, expected {expected!r}"]


@pytest.fixture(scope="module")
def contract_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    corpus = Corpus(tmp_path_factory.mktemp("contract") / "sessions")
    for path in EXAMPLES.glob("*.json"):
        shutil.copy(path, corpus.path / path.name)
    many = [f"第{n}个需求：请把第 {n} 项做完 ✅" for n in range(60)]
    corpus.write("many-inputs", session(*many, updated=1795939200000))
    corpus.write("emoji", session("👨‍👩‍👧‍👦" * 300, "🇨🇳" * 200, "é" * 10, updated="2026-11-29T08:00:00.000+08:00"))
    corpus.write("torn", b'{"title": "half written", "messages": [')
    corpus.write("array", b"[1, 2, 3]")
    corpus.write("no-times", {"messages": [{"role": "user", "content": "when?"}], "agent": "Codex"})
    corpus.write("same-time-b", session("b", updated="2026-11-29T09:00:00Z", created_from={"kind": "mcp", "sourceSessionId": SOURCE}))
    corpus.write("same-time-a", session("a", updated="2026-11-29T09:00:00Z", created_from={"kind": "mcp", "sourceSessionId": SOURCE}))
    corpus.write("other-kind", session("c", created_from={"kind": "MCP", "sourceSessionId": SOURCE}))
    (corpus.path / "ignored.json.tmp").write_text('{"createdFrom": {"kind": "mcp", "sourceSessionId": "orchestrator"}}')
    (corpus.path / ".hidden.json").write_text("{}")
    (corpus.path / "subdir.json").mkdir()
    (corpus.path / "subdir.json" / "inner.json").write_text("{}")
    (corpus.path / "link.json").symlink_to(corpus.path / "orchestrator.json")
    before = snapshot(corpus.path)
    yield corpus
    assert snapshot(corpus.path) == before, "the sessions directory was modified"


@pytest.fixture(scope="module")
def client(contract_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioClient]:
    db = tmp_path_factory.mktemp("contract-db") / "index.sqlite"
    with stdio_client_for(contract_corpus.path, db, source=SOURCE) as connected:
        yield connected


def test_tools_list_publishes_the_contract(client: StdioClient) -> None:
    tools = {tool.name: tool for tool in client.list_tools().tools}
    assert set(tools) == {"ccweb_list_user_inputs", "ccweb_list_conversations", "ccweb_wait_for_conversations"}

    inputs = tools["ccweb_list_user_inputs"]
    schema = inputs.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema.get("required", []) == []
    assert schema["properties"]["conversationId"]["type"] == "string"
    assert {k: schema["properties"]["limit"][k] for k in ("type", "minimum", "maximum", "default")} == {
        "type": "integer", "minimum": 1, "maximum": 50, "default": 15
    }  # fmt: skip
    assert {k: schema["properties"]["maxChars"][k] for k in ("type", "minimum", "maximum", "default")} == {
        "type": "integer", "minimum": 1, "maximum": 1000, "default": 1000
    }  # fmt: skip
    for word in ("15", "1000", "hasMore", "truncated", "code point"):
        assert word in inputs.description

    conversations = tools["ccweb_list_conversations"]
    schema = conversations.input_schema
    assert schema["additionalProperties"] is False and schema.get("required", []) == []
    assert schema["properties"]["scope"]["enum"] == ["all", "children", "descendants"]
    assert schema["properties"]["scope"]["default"] == "all"
    assert {k: schema["properties"]["limit"][k] for k in ("minimum", "maximum", "default")} == {
        "minimum": 1, "maximum": 100, "default": 20
    }  # fmt: skip
    assert schema["properties"]["agent"]["type"] == schema["properties"]["status"]["type"] == "string"
    for word in (
        "children", "direct", "MCP", "default", "changeToken", "ccweb_wait_for_conversations", "descendants",
        "nextCursor", "cursor", "conversationIds",
    ):  # fmt: skip
        assert word in conversations.description
    assert "changeToken" in conversations.output_schema["required"]

    wait = tools["ccweb_wait_for_conversations"]
    schema = wait.input_schema
    assert schema["additionalProperties"] is False and schema.get("required", []) == []
    selection = {k: v for k, v in schema["properties"].items() if k not in ("since", "timeoutSeconds")}
    assert selection == {k: v for k, v in conversations.input_schema["properties"].items() if k != "cursor"}
    assert schema["properties"]["since"]["type"] == "string"
    assert {k: schema["properties"]["timeoutSeconds"][k] for k in ("type", "minimum", "maximum", "default")} == {
        "type": "number", "minimum": 0, "maximum": 300, "default": 30
    }  # fmt: skip
    for word in ("since", "changeToken", "changed", "timedOut", "deleted", "ccweb_list_conversations", "too_many_waits"):
        assert word in wait.description
    assert set(conversations.output_schema["required"]) < set(wait.output_schema["required"])
    assert {"changed", "timedOut", "tokenReset", "changeToken"} <= set(wait.output_schema["required"])

    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"


USER_INPUT_CASES: list[dict[str, Any]] = [
    {},
    {"conversationId": None},
    {"conversationId": "orchestrator", "limit": 3, "maxChars": 200},
    {"conversationId": "orchestrator", "maxChars": 1},
    {"conversationId": "orchestrator", "limit": 2.9},
    {"conversationId": "orchestrator", "limit": 0.5, "maxChars": -0.0},
    {"conversationId": "orchestrator", "limit": 1e300, "maxChars": 99999},
    {"conversationId": "orchestrator", "limit": True, "maxChars": "50"},
    {"conversationId": "orchestrator", "limit": None, "maxChars": [5], "extra": "ignored"},
    {"conversationId": "many-inputs"},
    {"conversationId": "many-inputs", "limit": 50, "maxChars": 1000},
    {"conversationId": "many-inputs", "limit": -4},
    {"conversationId": "emoji", "maxChars": 1000},
    {"conversationId": "emoji", "maxChars": 301},
    {"conversationId": "cjk-notes", "maxChars": 21},
    {"conversationId": "no-times"},
    {"conversationId": "worker-ui"},
    {"conversationId": "torn"},
    {"conversationId": "array"},
    {"conversationId": "ghost"},
    {"conversationId": "link"},
    {"conversationId": "subdir"},
    {"conversationId": "ignored"},
    {"conversationId": ""},
    {"conversationId": "../orchestrator"},
    {"conversationId": "orchestrator\n"},
    {"conversationId": "a/b"},
    {"conversationId": "日本"},
    {"conversationId": "x" * 129},
    {"conversationId": 7},
    {"conversationId": ["orchestrator"]},
    {"conversationId": "orchestrator", "cursor": ""},
    {"conversationId": "orchestrator", "cursor": None},
    {"conversationId": "orchestrator", "cursor": "bm90IGEgY3Vyc29y"},
    {"conversationId": "orchestrator", "cursor": 7},
    {"conversationId": "ghost", "cursor": "garbage"},
]


@pytest.mark.parametrize("arguments", USER_INPUT_CASES, ids=repr)
def test_list_user_inputs(client: StdioClient, contract_corpus: Corpus, arguments: dict[str, Any]) -> None:
    same_answer(
        client.call("ccweb_list_user_inputs", arguments),
        reference.list_user_inputs(contract_corpus.path, arguments, SOURCE),
    )


CONVERSATION_CASES: list[dict[str, Any]] = [
    {},
    {"scope": "all"},
    {"scope": "children"},
    {"scope": "children", "limit": 1},
    {"scope": "children", "limit": 4},
    {"scope": "children", "status": "WAITING"},
    {"scope": "children", "agent": "CODEX"},
    {"scope": "CHILDREN"},
    {"scope": 7},
    {"scope": None},
    {"limit": 3},
    {"limit": 0},
    {"limit": 1000},
    {"limit": 5.99},
    {"limit": "3"},
    {"agent": "codex"},
    {"agent": "Claude", "limit": 2},
    {"agent": ""},
    {"agent": 5},
    {"status": "idle"},
    {"status": "Running"},
    {"status": " running"},
    {"status": "waiting", "agent": "codex"},
    {"agent": "nobody"},
    {"scope": "descendants"},
    {"scope": "descendants", "limit": 2},
    {"scope": "descendants", "status": "running"},
    {"scope": "DESCENDANTS"},
    {"conversationIds": ["worker-ui", "ghost", "grandchild", "worker-ui"]},
    {"conversationIds": []},
    {"conversationIds": None},
    {"conversationIds": ["orchestrator", "worker-api"], "scope": "children"},
    {"conversationIds": ["grandchild", "cjk-notes"], "scope": "descendants"},
    {"conversationIds": ["worker-ui", "bad/id"]},
    {"conversationIds": "worker-ui"},
    {"conversationIds": [7]},
    {"conversationIds": [f"w{n}" for n in range(100)]},
    {"conversationIds": [f"w{n}" for n in range(101)]},
    {"cursor": ""},
    {"cursor": "garbage"},
    {"cursor": ["a"]},
    {"scope": "children", "cursor": "x" * 5000},
]


@pytest.mark.parametrize("arguments", CONVERSATION_CASES, ids=repr)
def test_list_conversations(client: StdioClient, contract_corpus: Corpus, arguments: dict[str, Any]) -> None:
    same_answer(
        client.call("ccweb_list_conversations", arguments),
        reference.list_conversations(contract_corpus.path, arguments, SOURCE),
    )


PAGED_CASES: list[tuple[str, dict[str, Any], list[int]]] = [
    ("ccweb_list_conversations", {}, [3, 1, 100]),
    ("ccweb_list_conversations", {"scope": "children", "limit": 2}, [2]),
    ("ccweb_list_conversations", {"scope": "descendants"}, [1]),
    ("ccweb_list_conversations", {"agent": "claude"}, [2, 5]),
    ("ccweb_list_user_inputs", {"conversationId": "many-inputs", "maxChars": 100}, [4, 50, 1]),
    ("ccweb_list_user_inputs", {"conversationId": "emoji", "maxChars": 250}, [2]),
    ("ccweb_list_user_inputs", {"conversationId": "orchestrator", "maxChars": 30}, [1, 3]),
]


@pytest.mark.parametrize(("tool", "arguments", "limits"), PAGED_CASES, ids=repr)
def test_paging_to_the_end(
    client: StdioClient, contract_corpus: Corpus, tool: str, arguments: dict[str, Any], limits: list[int]
) -> None:
    """Every page as the reference's, each side following its own cursors, limits changing per page."""
    oracle = reference.list_user_inputs if tool == "ccweb_list_user_inputs" else reference.list_conversations
    ours, theirs, seen = dict(arguments), dict(arguments), []
    for page in range(200):
        ours["limit"] = theirs["limit"] = limits[page % len(limits)]
        got, want = client.call(tool, ours), oracle(contract_corpus.path, theirs, SOURCE)
        same_answer(got, want)
        seen += got[0].get("conversations", [])
        if got[0]["nextCursor"] is None:
            break
        ours["cursor"], theirs["cursor"] = got[0]["nextCursor"], want[0]["nextCursor"]
    else:
        raise AssertionError("the pages never ended")
    if tool == "ccweb_list_conversations":  # every conversation once, in answer order
        whole, _ = oracle(contract_corpus.path, {**arguments, "limit": 100}, SOURCE)
        assert seen == whole["conversations"]


def test_children_are_direct_mcp_children_only(client: StdioClient) -> None:
    payload, _ = client.call("ccweb_list_conversations", {"scope": "children"})
    assert [row["conversationId"] for row in payload["conversations"]] == [
        "same-time-a", "same-time-b", "worker-ui", "worker-api", "worker-docs"
    ]  # fmt: skip
    assert all(set(row) == {
        "conversationId", "title", "agent", "status", "createdAt", "updatedAt", "createdFromKind",
        "parentConversationId", "userInputCount",
    } and row["parentConversationId"] == SOURCE for row in payload["conversations"])  # fmt: skip


@pytest.mark.parametrize("source", [None, "", "bad/source", "x" * 200])
def test_without_a_source(contract_corpus: Corpus, tmp_path: Path, source: str | None) -> None:
    env = {} if source is None else {"CCWEB_SOURCE_SESSION_ID": source}
    with stdio_client_for(contract_corpus.path, tmp_path / "db.sqlite", env=env) as client:
        for name, arguments in [
            ("ccweb_list_user_inputs", {}),
            ("ccweb_list_user_inputs", {"conversationId": None}),
            ("ccweb_list_conversations", {"scope": "children"}),
            ("ccweb_list_conversations", {}),
            ("ccweb_list_user_inputs", {"conversationId": "orchestrator", "limit": 1}),
        ]:
            tool = reference.list_user_inputs if name == "ccweb_list_user_inputs" else reference.list_conversations
            same_answer(client.call(name, arguments), tool(contract_corpus.path, arguments, source))
        payload, _ = client.call("ccweb_list_conversations", {})
        assert payload["sourceConversationId"] is None


def test_unknown_tool_is_a_tool_error(client: StdioClient) -> None:
    payload, is_error = client.call("ccweb_delete_everything", {})
    assert is_error and payload["error"]["code"] == "unknown_tool"


def test_the_rows_come_last_in_every_answer(client: StdioClient) -> None:
    """Claude Code shows a model only the first 2 KB of an answer over about 50,000 characters: every
    field but the rows (a wait's `changed` and `changeToken` above all) comes before them."""
    for tool, arguments, rows in (
        ("ccweb_list_user_inputs", {}, "inputs"),
        ("ccweb_list_conversations", {"scope": "descendants"}, "conversations"),
        ("ccweb_wait_for_conversations", {"timeoutSeconds": 0}, "conversations"),
    ):
        payload, is_error = client.call(tool, arguments)
        assert not is_error and list(payload)[-1] == rows, (tool, list(payload))


def test_the_instructions_say_how_to_wait_in_what_codex_shows_first(corpus: Corpus, db_path: Path) -> None:
    """Codex 0.171 shows its model the server's instructions cut to about 245 characters until its
    tools are searched for (a stand-in model saw them end "ccweb_wait_for_conversations ..."), and
    lost the wait's hint: list once, then wait with `since` set to the last changeToken."""
    with memory_client_for(corpus.path, db_path) as client:
        result = client.session.initialize_result
    assert result is not None and result.instructions is not None
    shown = result.instructions[:240]
    for words in ("ccweb_list_user_inputs", "ccweb_list_conversations", '"children"', "ccweb_wait_for_conversations",
                  "since", "changeToken"):  # fmt: skip
        assert words in shown, (words, shown)
