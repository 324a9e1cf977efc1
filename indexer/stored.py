"""What the index keeps of a user input: no more than an answer can ever show.

An answer shows at most `maxChars` code points of all its inputs together, and an input cut to fit
keeps its head; `originalChars` needs only the full length. So the index keeps each input's first
STORED_INPUT_CHARS code points and its length, which holds every answer byte for byte while the
index stays small when people paste logs and code (issue 12).
"""

from __future__ import annotations

# The largest maxChars either tool accepts: server.tools takes its bound from here, so the two
# cannot drift apart. Raising it makes indexes written with a smaller value rebuild from the files
# when opened (indexer.db); the value an index was written with is its meta key STORED_CHARS_KEY.
STORED_INPUT_CHARS = 1_000
STORED_CHARS_KEY = "stored_input_chars"


def stored_head(content: str) -> str:
    """The part of an input the index keeps. Python's str counts code points, as the answers do."""
    return content[:STORED_INPUT_CHARS]


def stored_head_utf8(content: str) -> bytes:
    """`stored_head` as the UTF-8 that SQLite stores: made once in the parse worker, it crosses the
    pipe and is bound as it is (indexer.store), where a str would be decoded by pickle in the parent
    and encoded again by sqlite3 (a fifth of the parent's CPU on issue 12's long corpus)."""
    return stored_head(content).encode()
