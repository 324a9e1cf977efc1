"""Hypothesis strategies for cc-web session files and tool arguments.

All sizes are small so a CI profile runs fast. Every strategy is built once (functools.cache): rebuilt
at each draw, Hypothesis spends most of a fuzz test re-deriving the same strategy objects. Generated data stays clear of the points the
contract leaves open, so product and tests/reference.py must agree on every example: nesting
between 500 levels and the decoder's limit (which follows sys.getrecursionlimit(): about 1,000,
about 3,000 inside a Hypothesis test), time-zone offsets beyond ±14:59, input year 0000, and
NaN/Infinity in tool arguments are never generated.

Public strategies:
    session_ids()          valid ids, mostly from ID_POOL so children lookups hit
    invalid_ids()          strings that are not valid ids
    time_values()          values for createdAt / updatedAt / timestamp fields
    messages()             one element of a messages array (objects and non-objects)
    session_docs()         dicts shaped like cc-web session files
    session_file_bytes()   file contents, mostly valid, sometimes broken
    tool1_args(known_ids=()), tool2_args()   (with cursors no page returned; tests/test_fuzz.py pages)
    sources(known_ids=())  the configured source conversation (valid, invalid or None)
    corpora()              {file name: bytes} for a whole sessions directory
    corpus_ids(files)      the ids of the session files in a corpora() dict
    input_texts()          lists of user-input texts (0-60), for the budget algorithm
    weighted((w, strategy), ...)   a one_of whose weights hold
"""

from __future__ import annotations

import json
from functools import cache

from hypothesis import strategies as st

ID_POOL = ("src", "child-1", "child_2", "grandchild", "Branch9", "other")
ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


@st.composite
def weighted(draw, *choices):
    """weighted((3, a), (1, b)) draws from a three times out of four. Unlike st.one_of, which
    flattens nested one_ofs into equally likely branches (and drops duplicates), the weights
    hold. Shrinks towards the first choice."""
    pick = draw(st.integers(0, sum(w for w, _ in choices) - 1))
    for w, strategy in choices:
        if pick < w:
            return draw(strategy)
        pick -= w
    raise AssertionError("unreachable")


# Plain values of every JSON type, for "wrong type" cases (each one_of counts as one branch).
json_scalars = weighted((1, st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
)))
json_junk = weighted((1, st.one_of(
    json_scalars, st.just([]), st.just({}), st.just([1, "a"]), st.just({"a": 1}),
)))


# --------------------------------------------------------------------------- ids


@cache
def session_ids():
    return weighted(
        (6, st.sampled_from(ID_POOL)),
        (3, st.text(ID_ALPHABET, min_size=1, max_size=12)),
        (1, st.just("a" * 128)),
    )


@cache
def invalid_ids():
    return st.sampled_from([
        "", "../x", "a/b", "a.b", "a b", "é", "ид", "日本", "a\x00b", "a\nb", "src\n", "\nsrc",
        " src", "src ", "a" * 129, ".", "..", "src.json", "a\\b", "a:b", "a*", "a١",
    ])


@cache
def sources(known_ids=()):
    """The configured source conversation; known_ids (e.g. corpus_ids(files)) are favoured."""
    known = tuple(known_ids) or ID_POOL
    return weighted((6, st.sampled_from(known)), (2, st.sampled_from(ID_POOL)), (2, st.none()),
                    (1, invalid_ids()), (1, session_ids()))


# --------------------------------------------------------------------------- times


@cache
@st.composite
def _iso_strings(draw):
    year = draw(st.one_of(st.integers(1990, 2035), st.integers(1, 9999)))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, 31))  # invalid dates (Feb 30) are part of the test
    hour, minute, second = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    sep = draw(st.sampled_from(["T", "T", "t", " "]))
    text = f"{year:04d}-{month:02d}-{day:02d}{sep}{hour:02d}:{minute:02d}"
    if draw(st.booleans()):
        text += f":{second:02d}"
        if draw(st.booleans()):
            text += "." + draw(st.text("0123456789", min_size=1, max_size=9))
    zone = draw(st.sampled_from(["Z", "Z", "z", "+HH:MM", "-HH:MM", "+HHMM", "-HHMM", "+HH", "-HH"]))
    if zone not in ("Z", "z"):
        off_h = draw(st.integers(0, 14))
        off_m = draw(st.sampled_from([0, 30, 45, 15, 59]))
        zone = zone.replace("HH", f"{off_h:02d}").replace("MM", f"{off_m:02d}")
    return text + zone


EDGE_TIME_STRINGS = [
    "2026-11-29T08:00:00.000Z", "2026-11-29T08:00:00Z", "2026-11-29T08:00Z",
    "2026-11-29t08:00:00z", "2026-11-29 08:00:00+09:00", "2026-11-29T08:00:00.123456789Z",
    "2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z", "2026-04-31T00:00:00Z",
    "2026-11-29T08:00:00", "2026-11-29", "2026-11-29T24:00:00Z", "2016-12-31T23:59:60Z",
    "2026-11-29T08:60:00Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z",
    "0001-01-01T00:00:00.000Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:59:59.999Z",
    "9999-12-31T23:30:00-01:00", "1969-12-31T23:59:59.9999Z", "1970-01-01T00:00:00.000+00:00",
    "2026-11-29T08:00:00.Z", "2026-11-29T08:00:00,5Z", "2026-11-29T8:00:00Z", "26-11-29T08:00Z",
    "2026-11-29T08:00:00 Z", " 2026-11-29T08:00:00Z", "2026-11-29T08:00:00Z ", "2026-11-29T08:00:00+0",
    "2026-11-29T08:00:00+09:0", "2026-11-29T08:00:00Z\n", "２０２６-11-29T08:00:00Z",
    "yesterday", "", "null", "1700000000000",
]


@cache
def time_values():
    return weighted(
        (6, _iso_strings()),
        (3, st.sampled_from(EDGE_TIME_STRINGS)),
        (3, st.integers(1_600_000_000_000, 1_900_000_000_000)),  # plausible epoch ms
        (1, st.integers(-62_135_596_800_001, 253_402_300_800_000)),  # whole range and just outside
        (1, st.sampled_from([0, -1, -62_135_596_800_000, -62_135_596_800_001, 253_402_300_799_999,
                             253_402_300_800_000, 2**63, -(2**63), 10**30])),
        (2, st.floats(-1e13, 1e13, allow_nan=False)),  # fractional ms, truncated toward zero
        (1, st.sampled_from([1.5, -1.5, -0.0, 1e300, -1e300, 1700000000000.999, -62135596800000.5])),
        (2, st.sampled_from([None, True, False, [], {}, {"$date": 1}])),
    )


# --------------------------------------------------------------------------- messages

TEXTS = [
    "hello", "Please fix the bug", "  padded  ", "日本語の入力", "中文输入测试", "😀", "👩‍💻 emoji zwj",
    "a\nb", "", " ", "\n\t ", "\u3000", "\u00a0", "\u200b", "x" * 50, "\r\n",
]


@cache
def _long_texts(max_len=1200):
    letters = st.sampled_from(["a", "界", "😀", " ", "é"])
    return st.builds(lambda ch, n: ch * n, letters, st.integers(0, max_len))


@cache
def texts():
    return weighted(
        (4, st.sampled_from(TEXTS)),
        (3, st.text(max_size=20)),
        (2, _long_texts()),  # to exercise the character budget
    )


@cache
def nonblank_texts():
    """Texts that make a user message an input (not empty, not whitespace only)."""
    return st.one_of(
        st.sampled_from([t for t in TEXTS if t.strip()]),
        _long_texts().map(lambda t: t.replace(" ", "x") or "x"),
        st.text(min_size=1, max_size=20).filter(lambda t: not t.isspace()),
    )


@cache
def input_texts():
    """Lists of user-input texts (oldest first), for unit tests of the budget algorithm."""
    return st.lists(nonblank_texts(), max_size=60)


@cache
def content_blocks():
    return st.one_of(
        texts(),
        st.fixed_dictionaries({"type": st.just("text"), "text": texts()}),
        st.fixed_dictionaries({"type": st.just("text"), "text": json_junk}),
        st.fixed_dictionaries({"type": st.just("text")}),
        st.fixed_dictionaries({"type": st.sampled_from(["Text", "image", "tool_use"]), "text": texts()}),
        st.just({"type": "image", "source": {"type": "base64", "data": "AAAA"}}),
        st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": st.just("t1"),
                               "content": st.one_of(texts(), st.just([{"type": "text", "text": "out"}]))}),
        json_scalars,
    )


@cache
def contents():
    return weighted((5, texts()), (3, st.lists(content_blocks(), max_size=4)), (1, json_junk))


@cache
def message_ids():
    return weighted(
        (4, st.text(max_size=8)),
        (2, st.integers(-(2**70), 2**70)),
        (1, st.sampled_from([3.0, 1.5, -0.0, 1e21, 1e20, 1e-7, 0.000001, 123456789.125, 2**53 + 0.0])),
        (1, st.floats(allow_nan=False, allow_infinity=False)),
        (1, st.sampled_from([None, True, False, [], {}])),
    )


@cache
def form_prompts():
    return st.one_of(
        st.just({"type": "form", "fields": [{"name": "q", "label": "Pick"}]}),
        st.just({}),
        json_scalars,  # not an object: never "waiting"
    )


def _message(role):
    return st.fixed_dictionaries(
        {"role": role},
        optional={
            "content": contents(),
            "id": message_ids(),
            "createdAt": time_values(),
            "timestamp": time_values(),
            "ccwebPrompt": form_prompts(),
        },
    )


@cache
def messages():
    return weighted(
        (5, _message(st.just("user"))),
        (3, _message(st.just("assistant"))),
        (1, _message(st.sampled_from(["system", "User", "user ", "tool", ""]))),
        (1, st.fixed_dictionaries({}, optional={"content": contents(), "id": message_ids()})),  # no role
        (1, json_junk),  # non-object element
    )


@cache
def form_cards():
    """The pending guided-form card: an assistant message carrying ccwebPrompt."""
    return st.fixed_dictionaries(
        {"role": st.just("assistant"), "ccwebPrompt": form_prompts()},
        optional={"content": contents(), "id": message_ids(), "createdAt": time_values()},
    )


@cache
@st.composite
def message_lists(draw):
    items = draw(st.lists(messages(), max_size=11))  # 0-12 with the optional form card
    if draw(st.integers(0, 3)) == 0:
        items.append(draw(form_cards()))
    return items


# --------------------------------------------------------------------------- documents


def _strings_or_junk(samples):
    return weighted((6, st.sampled_from(samples)), (2, st.text(max_size=8)), (2, json_junk))


@cache
def created_froms():
    return weighted(
        (4, st.fixed_dictionaries(
            {},
            optional={
                "kind": weighted((4, st.sampled_from(["mcp", "mcp", "branch", "MCP", " mcp", "other", ""])),
                                 (1, json_junk)),
                "sourceSessionId": weighted((4, st.sampled_from(ID_POOL)), (1, session_ids()),
                                            (1, json_junk)),
                "extra": json_scalars,
            },
        )),
        (1, json_junk),  # not an object: no createdFrom
    )


@cache
def _wild_docs():
    """Every field optional and of any shape."""
    return st.fixed_dictionaries(
        {},
        optional={
            "title": _strings_or_junk(["My title", "", "  ", "日本語", "😀 emoji"]),
            "agent": _strings_or_junk(["claude", "Claude", "CLAUDE", " claude", "codex", "", "  "]),
            "status": _strings_or_junk(["idle", "Idle", " RUNNING ", "waiting", "Waiting",
                                        "done", "", "   ", "\t"]),
            "createdAt": time_values(),
            "updatedAt": time_values(),
            "createdFrom": created_froms(),
            "messages": weighted((4, message_lists()), (1, json_junk)),
            "id": st.text(max_size=5),  # unknown keys are ignored
        },
    )


@cache
def _plausible_messages():
    """What cc-web usually writes: user and assistant turns with text and parseable times."""
    user = st.fixed_dictionaries(
        {"role": st.just("user"),
         "content": weighted((5, nonblank_texts()), (2, texts()),
                             (2, st.lists(content_blocks(), max_size=3)))},
        optional={"id": message_ids(), "createdAt": _iso_strings(),
                  "timestamp": st.integers(1_600_000_000_000, 1_900_000_000_000)},
    )
    assistant = st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": texts()},
        optional={"id": st.text(ID_ALPHABET, max_size=6), "createdAt": _iso_strings()},
    )
    return st.lists(weighted((4, user), (3, assistant), (2, messages())), max_size=11)


@cache
@st.composite
def _plausible_docs(draw):
    doc = draw(st.fixed_dictionaries(
        {"messages": _plausible_messages()},
        optional={
            "title": st.one_of(texts(), json_junk),
            "agent": st.sampled_from(["claude", "Claude", "CLAUDE", " claude", "codex", "Codex", ""]),
            "status": st.sampled_from(["idle", "Idle", " RUNNING ", "waiting", "done", "", "  "]),
            "createdAt": st.one_of(_iso_strings(), st.integers(1_600_000_000_000, 1_900_000_000_000)),
            "updatedAt": st.one_of(_iso_strings(), st.integers(1_600_000_000_000, 1_900_000_000_000),
                                   time_values()),
            "createdFrom": st.fixed_dictionaries({
                "kind": st.sampled_from(["mcp", "mcp", "mcp", "branch", "MCP"]),
                "sourceSessionId": st.sampled_from(ID_POOL),
            }),
        },
    ))
    if draw(st.integers(0, 3)) == 0:
        doc["messages"].append(draw(form_cards()))
    return doc


@cache
def session_docs():
    return weighted((3, _plausible_docs()), (2, _wild_docs()))


# --------------------------------------------------------------------------- file bytes


def _dumps(doc, ensure_ascii: bool) -> bytes:
    return json.dumps(doc, ensure_ascii=ensure_ascii).encode("utf-8")  # allow_nan: no NaN in docs


@cache
@st.composite
def valid_file_bytes(draw):
    doc = draw(session_docs())
    if draw(st.booleans()):
        order = draw(st.permutations(list(doc)))
        doc = {key: doc[key] for key in order}
    indent = draw(st.sampled_from([None, None, 1, "\t"]))
    data = json.dumps(doc, ensure_ascii=draw(st.booleans()), indent=indent).encode("utf-8")
    variant = draw(st.integers(0, 9))
    if variant == 0:  # duplicate key before the real one: the last wins
        dup = draw(st.sampled_from(["title", "status", "messages", "createdFrom", "updatedAt"]))
        data = b'{"' + dup.encode() + b'": "dup"' + (b"," if doc else b"") + data[1:]
    elif variant == 1:  # shallow but real nesting, readable
        data = data[:-1] + (b", " if doc else b"") + b'"deep": ' + b"[" * 40 + b"]" * 40 + b"}"
    if draw(st.integers(0, 4)) == 0:  # insignificant whitespace around the document
        data = draw(st.sampled_from([b" ", b"\n", b"\t\r\n"])) + data + b"\n"
    return data


@cache
@st.composite
def broken_file_bytes(draw):
    good = _dumps(draw(session_docs()), draw(st.booleans()))
    kind = draw(st.sampled_from([
        "truncated", "empty", "bad-utf8", "bom", "nan", "infinity", "overflow", "top-array",
        "top-string", "top-null", "surrogate", "surrogate-key", "deep", "control-char",
        "trailing", "overlong", "encoded-surrogate",
    ]))
    if kind == "truncated":
        return good[: draw(st.integers(0, len(good) - 1))]
    if kind == "empty":
        return draw(st.sampled_from([b"", b" ", b"\n"]))
    if kind in ("bad-utf8", "overlong", "encoded-surrogate"):
        bad = {"bad-utf8": draw(st.sampled_from([b"\xff", b"\x80", b"\xc3", b"\xe6\x97"])),
               "overlong": b"\xc0\xaf", "encoded-surrogate": b"\xed\xa0\x80"}[kind]
        at = good.find(b'"') + 1  # inside the first string (a key), or at 0 for "{}"
        return good[:at] + bad + good[at:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + good
    if kind in ("nan", "infinity", "overflow"):
        literal = {"nan": b"NaN", "infinity": draw(st.sampled_from([b"Infinity", b"-Infinity"])),
                   "overflow": draw(st.sampled_from([b"1e400", b"-1e400", b"1" + b"0" * 400 + b".0"]))}[kind]
        key = draw(st.sampled_from([b"updatedAt", b"x", b"id", b"createdAt", b"timestamp", b"role", b"content"]))
        if key in (b"updatedAt", b"x"):
            return b'{"' + key + b'": ' + literal + (b", " + good[1:] if good != b"{}" else b"}")
        # In a message: only that message's own decode meets it. Last, so that its messages win.
        value = b'["a", ' + literal + b"]" if key == b"content" else literal
        message = b'{"role": "user", "content": "hi", "' + key + b'": ' + value + b"}"
        return (good[:-1] + b", " if good != b"{}" else b"{") + b'"messages": [' + message + b"]}"
    if kind == "top-array":
        return b"[" + good + b"]"
    if kind == "top-string":
        return json.dumps(good.decode("utf-8")).encode()
    if kind == "top-null":
        return draw(st.sampled_from([b"null", b"1", b"true", b'"x"']))
    if kind == "surrogate":
        where = draw(st.sampled_from(["title", "content"]))
        lone = draw(st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\udc00\ud800"]))
        doc = {"title": lone} if where == "title" else {"messages": [{"role": "user", "content": lone}]}
        return json.dumps(doc, ensure_ascii=True).encode()
    if kind == "surrogate-key":
        return b'{"\\ud800": 1, "title": "t"}'
    if kind == "deep":
        # Far beyond any decoder limit: msgspec's and json's limits follow sys.getrecursionlimit(),
        # which Hypothesis itself raises (to about 2,000) while a test runs.
        n = draw(st.integers(20_000, 40_000))
        return b'{"x": ' + b"[" * n + b"]" * n + b"}"
    if kind == "control-char":
        return b'{"title": "a\x01b"}'
    return good + draw(st.sampled_from([b"x", b"{}", b"\x00", b","]))  # trailing


@cache
def session_file_bytes():
    return weighted((4, valid_file_bytes()), (1, broken_file_bytes()))


# --------------------------------------------------------------------------- tool arguments


@cache
def _numbers(minimum, maximum):
    return weighted(
        (6, st.integers(minimum, min(maximum, 12))),  # small values: limits that bite
        (4, st.integers(minimum, maximum)),
        (1, st.integers(-5, 0)),
        (1, st.integers(maximum, maximum + 50)),
        (1, st.integers(-(2**70), 2**70)),
        (2, st.floats(-10.0, maximum + 10.0)),
        (2, st.sampled_from([0.5, 1.0, 2.9, -0.0, -0.5, 1e300, -1e300, 1e308, float(maximum) + 0.9])),
        (3, st.sampled_from([None, True, False, "5", "", "ten", {}, [], [5]])),
    )


@cache
def _conversation_ids(known_ids):
    known = tuple(known_ids) or ID_POOL
    return weighted((8, st.sampled_from(known)), (2, session_ids()), (2, invalid_ids()), (3, st.none()),
                    (1, st.sampled_from([7, 1.5, True, [], {}])))


@cache
def tool1_args(known_ids=()):
    """Arguments of ccweb_list_user_inputs; conversationId favours known_ids when given
    (e.g. corpus_ids(files)), so that most calls find their conversation."""
    return st.fixed_dictionaries(
        {},
        optional={
            "conversationId": _conversation_ids(known_ids),
            "limit": _numbers(1, 50),
            "maxChars": _numbers(1, 1000),
            "cursor": _garbage_cursors(),
            "unknown": json_scalars,  # ignored
        },
    )


def _filters(samples):
    return weighted((5, st.sampled_from(samples)), (1, st.text(max_size=4)),
                    (2, st.sampled_from([None, 7, True, [], {}])))


@cache
def tool2_args():
    return st.fixed_dictionaries(
        {},
        optional={
            "agent": _filters(["claude", "CLAUDE", "Claude", "codex", " claude", ""]),
            "status": _filters(["idle", "IDLE", "waiting", "running", "done", " idle", ""]),
            "limit": _numbers(1, 100),
            "scope": weighted((3, st.just("children")), (2, st.just("descendants")),
                              (2, st.sampled_from(["all", "CHILDREN", "", " children", "descendant", 7, None,
                                                   True, []]))),
            "conversationIds": weighted(
                (4, st.lists(session_ids(), max_size=5)),
                (1, st.lists(weighted((4, session_ids()), (1, invalid_ids()), (1, json_scalars)), max_size=3)),
                (1, st.sampled_from([None, "src", 7, {}, [], ["src"] * 101])),
            ),
            "cursor": _garbage_cursors(),
            "unknown": json_scalars,
        },
    )


def _garbage_cursors():
    """Cursors no page returned: the empty string and null mean none; anything else is refused."""
    return st.one_of(st.sampled_from(["", None, "AAAA", "not a cursor", "WyJjIiwxLCJhIl0", 7, [], {}]),
                     st.text(max_size=30))


# --------------------------------------------------------------------------- directories

NON_SESSION_NAMES = [
    "x.json.tmp", ".hidden.json", "a b.json", "bad.JSON", "src.json~", ".json", "notes.txt",
    "a.b.json", "é.json", "a" * 129 + ".json",
]


@cache
@st.composite
def corpora(draw, max_sessions=6):
    """{file name: bytes} for a sessions directory: sessions plus a few non-session files
    (which are never sessions whatever they contain)."""
    ids = draw(st.lists(st.sampled_from(ID_POOL), max_size=len(ID_POOL), unique=True))
    more = st.text(ID_ALPHABET, min_size=1, max_size=12)
    ids += draw(st.lists(more, max_size=max(0, max_sessions - len(ids))))
    ids = list(dict.fromkeys(ids))[:max_sessions]
    files = {f"{i}.json": draw(session_file_bytes()) for i in ids}
    for name in draw(st.lists(st.sampled_from(NON_SESSION_NAMES), max_size=2, unique=True)):
        files[name] = draw(valid_file_bytes())
    return files


def corpus_ids(files) -> list[str]:
    """The conversation ids of the session files in a corpora() dict (readable or not)."""
    return [name[: -len(".json")] for name in files
            if name.endswith(".json") and name not in NON_SESSION_NAMES]
