"""The long-input corpus profile (issue 12): people paste logs, stack traces and code into prompts.

Used by ``python -m bench.gen_corpus --profile long``. Same plan as the short profile (ids, agents,
the hot source and its children, the ~20 MB tail is not used here), different sessions:

- 30-100 messages per session: a user input, sometimes one or two tool calls and their results,
  then the assistant's answer;
- user inputs with a heavy-tailed length in code points: a lognormal body (median
  ``INPUT_MEDIAN_CHARS``) and a Pareto tail of pasted logs (``TAIL_SHARE`` of inputs from
  ``TAIL_MIN_CHARS``, capped at ``INPUT_MAX_CHARS``), which gives about median 300, p90 3,000,
  p99 30,000 and a few dozen inputs over 100,000 per 270,000; the generator reports what it drew;
- what is pasted: CJK prose with emoji, log lines, Python/Java/Node stack traces, code, usually
  behind a short CJK question;
- tool results several times the size of the session's inputs (``TOOL_RESULT_RATIO``).

Deterministic: everything comes from ``random.Random`` seeded from the seed and the session id.
``scale`` multiplies tool results and assistant text; input lengths scale by its square root, as in
the short profile.
"""

from __future__ import annotations

import math
import random
from functools import cache

from bench.gen_corpus import _EMOJI, _SPAN_MS, _T0_MS, _TOOLS, _iso, _Plan, _Text, _uuid, session_document

MESSAGES = (30, 100)
INPUT_MEDIAN_CHARS = 285
INPUT_SIGMA = 1.66
BODY_MAX_CHARS = 20_000
TAIL_SHARE = 0.025
TAIL_MIN_CHARS = 21_000
TAIL_ALPHA = 3.5
INPUT_MAX_CHARS = 130_000
TOOL_CALL_SHARE = 0.3  # of user inputs answered after one or two tool calls
TOOL_RESULT_RATIO = (2.5, 4.5)  # uniform: a session's tool results over its inputs, in bytes
ASSISTANT_MEDIAN_BYTES = 600

_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_SERVICES = ("api", "worker", "indexer", "gateway", "scheduler", "billing")
_LOG_TEXT = (
    "request done", "cache miss", "retrying after timeout", "connection reset by peer", "slow query",
    "会话已保存", "索引重建完成", "写入失败，稍后重试", "用户取消了请求", "配置已重新加载 ✅", "内存占用过高 ⚠️",
)  # fmt: skip
_QUESTIONS = (
    "帮我看看这个报错：", "这是日志，哪里出问题了？", "下面的代码为什么跑不通 🤔", "请分析一下这段输出：",
    "Can you check this trace?", "部署之后一直报这个错 😭", "这个函数怎么优化？", "看下这个：",
)  # fmt: skip


def _log_pool(rng: random.Random, lines: int) -> str:
    out = []
    t = _T0_MS
    for _ in range(lines):
        t += rng.randrange(1, 4_000)
        svc = rng.choice(_SERVICES)
        out.append(
            f"{_iso(t)} {rng.choice(_LEVELS):5} [{svc}-{rng.randrange(1, 9)}] "
            f"id={rng.getrandbits(48):012x} path=/api/v1/{svc}/{rng.randrange(1000)} "
            f"status={rng.choice((200, 200, 201, 304, 400, 404, 500, 502))} dur={rng.randrange(1, 3000)}ms "
            f"{rng.choice(_LOG_TEXT)}"
        )
    return "\n".join(out) + "\n"


def _trace_pool(rng: random.Random, traces: int) -> str:
    out = []
    for _ in range(traces):
        kind = rng.randrange(3)
        depth = rng.randint(4, 40)
        if kind == 0:
            frames = [
                f'  File "/srv/app/{rng.choice(_SERVICES)}/{rng.choice(("main", "db", "views", "tasks"))}.py", '
                f"line {rng.randrange(1, 900)}, in {rng.choice(('handle', 'run', 'load', '_call', 'get'))}\n"
                f"    {rng.choice(('return fn(*args)', 'rows = conn.execute(sql)', 'data = json.loads(body)'))}"
                for _ in range(depth)
            ]
            out.append("Traceback (most recent call last):\n" + "\n".join(frames) + "\nKeyError: 'session_id'")
        elif kind == 1:
            frames = [
                f"\tat com.example.{rng.choice(_SERVICES)}.{rng.choice(('Service', 'Repo', 'Handler'))}"
                f".{rng.choice(('invoke', 'apply', 'doFilter'))}({rng.choice(('Service', 'Main'))}.java:{rng.randrange(900)})"
                for _ in range(depth)
            ]
            out.append("java.lang.IllegalStateException: 状态不一致\n" + "\n".join(frames))
        else:
            frames = [
                f"    at {rng.choice(('Object.<anonymous>', 'processTicksAndRejections', 'Module._compile'))} "
                f"(/app/src/{rng.choice(_SERVICES)}.ts:{rng.randrange(900)}:{rng.randrange(80)})"
                for _ in range(depth)
            ]
            out.append("TypeError: Cannot read properties of undefined (reading 'id') 💥\n" + "\n".join(frames))
    return "\n\n".join(out) + "\n"


@cache  # the pools depend only on the seed: one run that makes several corpora makes them once
def _paste_pools(seed: int) -> tuple[str, str]:
    """(log pool, trace pool)."""
    rng = random.Random(f"ccweb-bench-long-pools:{seed}")
    return _log_pool(rng, 40_000), _trace_pool(rng, 3_000)


class LongGen:
    """Sessions of the long-input profile, from the short profile's prose and code pools."""

    def __init__(self, text: _Text, code: _Text, scale: float, seed: int) -> None:
        log, trace = _paste_pools(seed)
        self.pastes = {"prose": text, "code": code, "log": _Text(log), "trace": _Text(trace)}
        self.text = text
        self.scale = scale
        self.uscale = math.sqrt(scale)

    def input_chars(self, rng: random.Random) -> int:
        if rng.random() < TAIL_SHARE:
            n = TAIL_MIN_CHARS * (1.0 - rng.random()) ** (-1.0 / TAIL_ALPHA)
        else:
            n = min(BODY_MAX_CHARS, rng.lognormvariate(math.log(INPUT_MEDIAN_CHARS), INPUT_SIGMA))
        return max(1, int(min(INPUT_MAX_CHARS, n) * self.uscale))

    def user_text(self, rng: random.Random) -> str:
        n = self.input_chars(rng)
        if n < 120:
            return self.text.chars(rng, n).strip() or rng.choice(_EMOJI)
        kind = rng.choices(("prose", "log", "trace", "code"), weights=(40, 25, 15, 20))[0]
        if kind == "prose":
            return self.text.chars(rng, n)
        question = rng.choice(_QUESTIONS)
        body = self.pastes[kind].chars(rng, max(1, n - len(question) - 8))
        return f"{question}\n```\n{body}\n```"

    def session(self, plan: _Plan, seed: int) -> tuple[bytes, list[int]]:
        rng = random.Random(f"ccweb-bench-long-session:{seed}:{plan.sid}")
        codex = plan.agent == "codex"
        kinds = self._kinds(rng)
        user_texts = {i: self.user_text(rng) for i, kind in enumerate(kinds) if kind == "user"}
        input_bytes = sum(len(t.encode()) for t in user_texts.values())
        results = [i for i, kind in enumerate(kinds) if kind == "tool_result"]
        weights = [rng.lognormvariate(0.0, 1.0) for _ in results]
        tool_bytes = input_bytes * rng.uniform(*TOOL_RESULT_RATIO) * math.sqrt(self.scale)
        budget = {i: max(40, int(tool_bytes * w / (sum(weights) or 1.0))) for i, w in zip(results, weights)}

        t_ms = created_ms = _T0_MS + rng.randrange(0, _SPAN_MS)
        msgs: list[dict] = []
        pending = "toolu_0"
        for i, kind in enumerate(kinds):
            t_ms += int(rng.lognormvariate(math.log(20_000), 1.2))
            m: dict = {"id": _uuid(rng)}
            if kind == "user":
                t = user_texts[i]
                m.update(role="user", content=t if (codex or rng.random() < 0.7) else [{"type": "text", "text": t}])
            elif kind == "assistant":
                t = self.text.bytes_(rng, int(rng.lognormvariate(math.log(ASSISTANT_MEDIAN_BYTES), 1.0) * self.scale) + 8)
                m.update(role="assistant", content=t if codex else [{"type": "text", "text": t}])
            elif kind == "tool_use":
                pending = f"toolu_{rng.getrandbits(96):024x}"
                tool = {"type": "tool_use", "id": pending, "name": rng.choice(_TOOLS), "input": {"command": "cat app.log"}}
                m.update(role="assistant", content=[tool])
            else:  # a tool result: a user-role message that is not a user input
                src = self.pastes[rng.choice(("log", "code", "trace", "prose"))]
                body = src.bytes_(rng, budget[i])
                m.update(role="user", content=[{"type": "tool_result", "tool_use_id": pending, "content": body}])
            m["createdAt"] = _iso(t_ms)
            msgs.append(m)
        data = session_document(rng, plan, self.text, msgs, created_ms, t_ms)
        return data, [len(t) for t in user_texts.values()]

    @staticmethod
    def _kinds(rng: random.Random) -> list[str]:
        n_msgs = rng.randint(*MESSAGES)
        kinds: list[str] = []
        while len(kinds) < n_msgs:
            kinds.append("user")
            if rng.random() < TOOL_CALL_SHARE:
                kinds += ["tool_use", "tool_result"] * rng.randint(1, 2)
            kinds.append("assistant")
        del kinds[n_msgs:]
        if kinds[-1] == "tool_use":  # a call is never left without its result
            kinds[-1] = "assistant"
        return kinds
