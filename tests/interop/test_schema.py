"""What clients that rewrite tool schemas still show the model: the published tools/list, checked for it.

- Codex strips `minimum`, `maximum` and `default` from the schemas it shows the model, so every range
  and default must also be in the tool's description, in words the model reads.
- Single-type schema dialects (Gemini's OpenAPI subset; the Inspector's `--strict` check) reject a
  `type` array: a nullable field is `anyOf` [type, null].
- `readOnlyHint: true`: without it Codex refuses the call under `approval_policy = never`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from ccweb_index.server.tools import TOOLS


def subschemas(schema: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, dict):
        yield where, schema
        for key, value in schema.items():
            yield from subschemas(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for n, value in enumerate(schema):
            yield from subschemas(value, f"{where}/{n}")


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool["name"])
def test_every_range_and_default_is_in_the_description(tool: dict[str, Any]) -> None:
    checked = 0
    for name, prop in tool["inputSchema"]["properties"].items():
        if "minimum" in prop:
            phrase = f"{name} ({prop['minimum']}-{prop['maximum']}, default {prop['default']})"
            assert phrase in tool["description"], f"{tool['name']}: the description lacks {phrase!r}"
            assert f"default {prop['default']}" in prop["description"], name
            checked += 1
        elif "default" in prop:
            assert re.search(rf"{name} \"{prop['default']}\" \(the default\)", tool["description"]), name
            checked += 1
    assert checked >= 1


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool["name"])
def test_schemas_use_one_type_per_schema(tool: dict[str, Any]) -> None:
    for part in ("inputSchema", "outputSchema"):
        for where, schema in subschemas(tool[part]):
            assert not isinstance(schema.get("type"), list), f"{tool['name']} {part}{where}: use anyOf, not a type array"
            assert "nullable" not in schema, f"{tool['name']} {part}{where}: `nullable` is not JSON Schema"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool["name"])
def test_read_only(tool: dict[str, Any]) -> None:
    assert tool["annotations"]["readOnlyHint"] is True
    assert tool["annotations"]["destructiveHint"] is False
