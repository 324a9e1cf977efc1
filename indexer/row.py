"""The session row: what the index keeps of one session, and what a conversation answer is made of.

Defined once. The `sessions` table's columns of the same names, the INSERT in `indexer.store`, the
SELECTs in `server.queries` and the answer in `server.tools.conversation_row` all derive from its
fields; adding a column means adding a field here (and a migration).
"""

from __future__ import annotations

from typing import NamedTuple


class SessionRow(NamedTuple):
    id: str
    title: str | None
    agent: str | None
    agent_key: str | None  # agent, lower-cased: filters compare case-insensitively
    status: str
    created_at_ms: int | None
    updated_at_ms: int  # the file's mtime when neither the file nor a message says
    created_from_kind: str | None
    created_from_source: str | None
    user_input_count: int


COLUMNS = ", ".join(SessionRow._fields)
PLACEHOLDERS = ", ".join("?" * len(SessionRow._fields))
