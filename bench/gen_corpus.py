"""Deterministic corpus generator for the ccweb-index benchmark (issue 4).

    python -m bench.gen_corpus --sessions N --seed S --out DIR [--scale-bytes F] [--profile short|long]

Writes N cc-web session files ``DIR/<id>.json`` with realistic shapes and prints a
JSON summary on stdout.  Same arguments -> byte-identical files: everything is drawn
from ``random.Random`` instances seeded from ``seed``; neither the global RNG nor the
clock is used.

Shapes (issue 4, "The benchmark"):
- session sizes are lognormal (median ~100 KB, clipped at 10 MB), plus a tail of
  10-50 MB sessions, about 3 per 10,000; when N >= 1000 one of them is ~20 MB;
- message counts follow the size (lognormal per-message size), at least 2;
- text is mostly Chinese with emoji (plus some English, Japanese and code);
- ~10% of sessions are codex, ~30% were created from another session (2/3 "mcp",
  1/3 "branch"); one hot source has min(500, N // 4) MCP children, one source has
  exactly 3 MCP children (it also has a branch and a grandchild);
- guided-form cards (assistant messages carrying ``ccwebPrompt``) and their
  submissions (ordinary user messages), tool_use / tool_result messages,
  tool-result-only user messages, some sessions ending on a pending card (status
  "waiting"), some with an explicit ``status`` (in odd case/spacing);
- timestamps as ISO-8601 with Z, with +08:00, or epoch milliseconds; some files have
  ``createdFrom`` after the big ``messages`` array.

``--scale-bytes F`` multiplies all sizes (0.01 for smoke tests / 100,000 small sessions).

``--profile long`` (issue 12) keeps the plan (ids, agents, sources) and writes sessions where people
paste long inputs instead: see ``bench/corpus_long.py``. The summary's ``inputs`` gives the user
inputs' length distribution in code points, for either profile.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import random
import sys
from functools import cache

import msgspec

__all__ = ["generate", "main"]

MEDIAN_SESSION_BYTES = 100_000
SESSION_SIGMA = 1.1
BODY_MAX_BYTES = 10_000_000
TAIL_PER_SESSION = 3 / 10_000
TAIL_MIN_BYTES = 10_000_000
TAIL_MAX_BYTES = 50_000_000
BIG_SESSION_BYTES = 20_000_000
MEDIAN_MESSAGE_BYTES = 2_500
PER_MESSAGE_OVERHEAD = 220  # approximate JSON bytes around a message body
HOT_CHILDREN = 500
PROFILES = ("short", "long")

_EPOCH = _dt.datetime(1970, 1, 1)
_T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_SPAN_MS = 320 * 86_400_000  # sessions start between Jan 1 and mid-November 2026

_encoder = msgspec.json.Encoder()

# --------------------------------------------------------------------------- text

_ZH_WORDS = (
    "我们 你 我 他 这个 那个 需要 可以 已经 因为 所以 但是 如果 然后 现在 还是 没有 问题 代码 文件 "
    "函数 测试 数据 接口 服务 部署 配置 环境 版本 更新 修复 错误 异常 日志 性能 优化 数据库 索引 查询 "
    "缓存 请求 响应 用户 会话 消息 工具 模型 参数 返回 结果 目录 路径 权限 脚本 命令 运行 构建 发布 "
    "分支 提交 合并 冲突 检查 验证 确认 完成 开始 继续 重新 一下 一个 两个 三个 所有 每个 其他 这样 "
    "怎么 为什么 什么 哪里 应该 必须 不要 帮我 看看 分析 实现 设计 方案 需求 功能 页面 按钮 样式 组件 "
    "前端 后端 中文 表单 字段 选项 回答 里面 上面 下面 之前 之后 最后 第一 同时 另外 比如 例如 目前 "
    "好的 明白 收到 谢谢 辛苦 稍等 处理 调整 改成 保留 删除 添加 迁移 回滚 监控 告警 内存 线程 并发 "
    "超时 重试 队列 任务 调度 文档 说明 示例 注释 类型 变量 对象 数组 字符串 整数 时间 时区 格式 编码"
).split()
_EN_WORDS = (
    "the API server index session build test deploy config error fix update query cache request "
    "response user tool model token limit timeout retry schema migration commit branch merge "
    "review TODO OK JSON SQLite MCP stdio README CI"
).split()
_CODE_WORDS = (
    "def return import from class self None True False if else for in while try except raise "
    "async await yield lambda const let function => {} () [] = == != + - * / : ; , . "
    "print(len(x)) os.path.join sqlite3.connect json.loads msgspec.json.decode "
    "src/index.ts server/main.py indexer/scan.py tests/test_tools.py node_modules "
    "npm run build pytest -q git status git diff --stat ls -la cd .. 0 1 2 3 42 100 1024 "
    "ERROR WARN INFO DEBUG Traceback (most recent call last): File line KeyError ValueError "
    "__init__ __name__ 'utf-8' \"id\" \"role\" \"content\" null true false"
).split()
_JA = "こんにちは ありがとう 確認します 少々お待ちください テスト データ ファイル です ます".split()
_EMOJI = [
    "😀", "😂", "🙂", "😅", "🤔", "👍", "👏", "🙏", "🎉", "🚀", "✅", "❌", "⚠️", "🔥", "💡",
    "📌", "📝", "🐛", "🔧", "⏳", "❤️", "✨", "😭", "🤝", "👀", "💯", "🧪", "📦", "🌟", "😊",
    "👨‍💻", "👩‍🔬", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "🇨🇳", "🇯🇵", "🇺🇸",
]
_PUNCT_ZH = ["，", "。", "！", "？", "：", "；", "、", "（", "）", "“", "”", "……"]


# Text pool sizes in tokens: the full one from this scale up, else the small one.
_FULL_POOL_SCALE = 0.05
_POOL_TOKENS, _SMALL_POOL_TOKENS = 1_000_000, 200_000


def _build_pools(seed: int, scale: float) -> tuple[str, str]:
    """Return (mixed CJK text pool, code/log text pool)."""
    return _pools(seed, _POOL_TOKENS if scale >= _FULL_POOL_SCALE else _SMALL_POOL_TOKENS)


@cache  # the pools depend only on their arguments: one run that makes several corpora makes them once
def _pools(seed: int, n_tok: int) -> tuple[str, str]:
    rng = random.Random(f"ccweb-bench-pool:{seed}")
    rare = [chr(rng.randrange(0x4E00, 0x9FA6)) for _ in range(3000)]
    tokens: list[str] = []
    weights: list[float] = []

    def add(items, w):
        for it in items:
            tokens.append(it)
            weights.append(w / len(items))

    add(_ZH_WORDS, 62.0)
    add(rare, 8.0)
    add(_PUNCT_ZH, 14.0)
    add([" " + w + " " for w in _EN_WORDS], 6.0)
    add(_JA, 0.6)
    add(_EMOJI, 2.2)
    add(["\n"], 1.5)
    add(["\n\n", "\n- ", "\n1. ", "`x`", "**注意**"], 0.7)
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    text = "".join(rng.choices(tokens, cum_weights=cum, k=n_tok))

    ctoks = _CODE_WORDS + ["\n", "\n    ", "\n        ", "  "] * 6 + _ZH_WORDS[:20]
    code = " ".join(rng.choices(ctoks, k=n_tok // 4))
    return text, code


class _Text:
    __slots__ = ("pool", "n", "bpc")

    def __init__(self, pool: str):
        self.pool = pool
        self.n = len(pool)
        self.bpc = len(pool.encode("utf-8")) / self.n  # UTF-8 bytes per code point

    def chars(self, rng: random.Random, n: int) -> str:
        n = max(1, min(n, self.n - 1))
        start = rng.randrange(0, self.n - n)
        return self.pool[start:start + n]

    def bytes_(self, rng: random.Random, nbytes: int) -> str:
        return self.chars(rng, int(nbytes / self.bpc))


# --------------------------------------------------------------------------- helpers

def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def _iso(ms: int) -> str:
    return (_EPOCH + _dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _iso_offset(ms: int, hours: int = 8) -> str:
    d = _EPOCH + _dt.timedelta(milliseconds=ms + hours * 3_600_000)
    sign = "+" if hours >= 0 else "-"
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}{sign}{abs(hours):02d}:00"


def _session_time(rng: random.Random, ms: int):
    r = rng.random()
    if r < 0.74:
        return _iso(ms)
    if r < 0.86:
        return ms
    if r < 0.95:
        return _iso_offset(ms, 8)
    return _iso(ms - ms % 1000)[:-5] + "Z"  # no fractional seconds


# --------------------------------------------------------------------------- plan

class _Plan:
    __slots__ = ("sid", "target", "created_from", "agent")

    def __init__(self, sid: str, target: int):
        self.sid = sid
        self.target = target
        self.created_from: dict | None = None
        self.agent = "claude"


def _plan(n: int, seed: int, scale: float) -> tuple[list[_Plan], dict]:
    rng = random.Random(f"ccweb-bench-plan:{seed}")
    seen: set[str] = set()
    plans: list[_Plan] = []
    mu = math.log(MEDIAN_SESSION_BYTES)
    for _ in range(n):
        sid = _uuid(rng)
        while sid in seen:
            sid = _uuid(rng)
        seen.add(sid)
        size = min(BODY_MAX_BYTES * 0.95, rng.lognormvariate(mu, SESSION_SIGMA))
        size = max(1_500, size)
        plans.append(_Plan(sid, int(size * scale)))

    info: dict = {"big": None}
    # The tail: ~3 per 10,000 sessions of 10-50 MB; one of ~20 MB when n >= 1000.
    n_tail = int(round(n * TAIL_PER_SESSION))
    if n >= 1000:
        n_tail = max(1, n_tail)
    tail_idx = rng.sample(range(n), n_tail) if n_tail else []
    for k, i in enumerate(tail_idx):
        if k == 0 and n >= 1000:
            size = BIG_SESSION_BYTES * rng.uniform(0.98, 1.02)
            info["big"] = plans[i].sid
        else:
            size = math.exp(rng.uniform(math.log(TAIL_MIN_BYTES), math.log(TAIL_MAX_BYTES)))
        plans[i].target = int(size * scale)

    for p in plans:
        if rng.random() < 0.10:
            p.agent = "codex"
        elif rng.random() < 0.01:
            p.agent = None

    if n < 8:
        info.update(hot=None, three=None)
        return plans, info

    # Special sources (not created from anything themselves, not in the tail).
    order = list(range(n))
    rng.shuffle(order)
    tail_set = set(tail_idx)
    order = [i for i in order if i not in tail_set]
    hot_i, three_i = order[0], order[1]
    free = order[2:]
    hot, three = plans[hot_i], plans[three_i]
    info["hot"], info["three"] = hot.sid, three.sid

    n_from = int(round(0.30 * n))
    n_mcp = int(round(n_from * 2 / 3))
    n_branch = n_from - n_mcp
    n_hot = min(HOT_CHILDREN, n // 4)
    n_other_mcp = max(0, n_mcp - n_hot - 3)
    need = n_hot + 3 + n_other_mcp + n_branch
    if need > len(free):
        n_other_mcp = max(0, len(free) - n_hot - 3 - n_branch)
        n_branch = min(n_branch, len(free) - n_hot - 3)
    cur = 0

    def take(k):
        nonlocal cur
        out = free[cur:cur + k]
        cur += k
        return out

    def mcp(src: str) -> dict:
        return {"kind": "mcp", "sourceSessionId": src, "toolUseId": "toolu_" + f"{rng.getrandbits(96):024x}"}

    def branch(src: str) -> dict:
        return {"kind": "branch", "sourceSessionId": src, "fromMessageIndex": rng.randrange(0, 40)}

    for i in take(n_hot):
        plans[i].created_from = mcp(hot.sid)
    three_children = take(3)
    for i in three_children:
        plans[i].created_from = mcp(three.sid)
    other_mcp = take(n_other_mcp)
    branches = take(n_branch)
    # Sources for the rest: ~4% of sessions act as orchestrators (never hot/three for mcp).
    excluded = {hot_i, three_i}
    src_pool = [i for i in free[:max(1, n // 25)] if i not in excluded] or [free[-1]]
    for k, i in enumerate(other_mcp):
        if k == 0 and three_children:
            src = plans[three_children[0]].sid  # a grandchild of the 3-children source
        elif k in (1, 2):
            src = _uuid(rng)  # a source that has no session file (deleted)
        else:
            src = plans[rng.choice(src_pool)].sid
        if src != plans[i].sid:
            plans[i].created_from = mcp(src)
    for k, i in enumerate(branches):
        if k == 0:
            src = three.sid
        elif k <= 3:
            src = hot.sid
        else:
            src = plans[rng.choice(free)].sid
        if src != plans[i].sid:
            plans[i].created_from = branch(src)
    return plans, info


# --------------------------------------------------------------------------- sessions

_TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "mcp__ccweb__ccweb_list_conversations",
          "mcp__ccweb__ccweb_list_user_inputs")
_STATUSES = ("running", "Running ", "idle", " Idle", "done", "error", "WAITING", "completed")
_FORM_TITLES = ("部署确认", "需求澄清", "选择实现方案", "Release checklist", "测试范围", "数据迁移确认")
_FORM_OPTIONS = (("是", "否"), ("staging", "production"), ("方案 A：增量索引", "方案 B：全量重建"),
                 ("今天", "明天", "下周"), ("Yes", "No, later"), ("保留", "删除", "归档"))


def session_document(rng: random.Random, plan: _Plan, text: _Text, msgs: list[dict], created_ms: int, t_ms: int) -> bytes:
    """The session file around its messages: title, agent, status, times, createdFrom.

    Key order varies: createdFrom/updatedAt sometimes come after the big ``messages`` array.
    """
    codex = plan.agent == "codex"
    head: dict = {}
    if rng.random() < 0.97:
        head["title"] = text.chars(rng, rng.randint(4, 28)).strip().replace("\n", " ") or "新会话"
    if plan.agent is not None:
        head["agent"] = plan.agent
    r = rng.random()
    status = None
    if r < 0.15:
        status = rng.choice(_STATUSES)
    elif r < 0.17:
        status = "   "  # blank -> derived
    meta: dict = {}
    if status is not None:
        meta["status"] = status
    if rng.random() < 0.98:
        meta["createdAt"] = _session_time(rng, created_ms)
    if rng.random() < 0.95:
        meta["updatedAt"] = _session_time(rng, t_ms + rng.randrange(0, 5_000))
    if plan.created_from is not None:
        meta["createdFrom"] = plan.created_from
    extra_meta = {"cwd": "/home/dev/" + rng.choice(("billing", "web", "infra", "notes", "ccweb")),
                  "model": "gpt-5-codex" if codex else rng.choice(("claude-opus-4", "claude-sonnet-4"))}
    if rng.random() < 0.15:
        doc = {**head, **extra_meta, "messages": msgs, **meta}
    else:
        doc = {**head, **meta, **extra_meta, "messages": msgs}
    data = _encoder.encode(doc)
    if len(data) < 200_000 and rng.random() < 0.05:
        data = msgspec.json.format(data, indent=2)
    return data


class _Gen:
    def __init__(self, text: _Text, code: _Text, scale: float):
        self.text = text
        self.code = code
        self.scale = scale
        self.uscale = math.sqrt(scale)

    def user_text(self, rng: random.Random) -> str:
        if rng.random() < 0.02:
            n = int(rng.uniform(800, 4000) * self.uscale)  # a pasted document / log
        else:
            n = int(min(3000.0, rng.lognormvariate(math.log(45), 1.0)) * self.uscale)
        return self.text.chars(rng, max(1, n)).strip() or "好的👍"

    def form(self, rng: random.Random) -> tuple[dict, str]:
        title = rng.choice(_FORM_TITLES)
        fields = []
        lines = [f"【{title}】表单已提交"]
        for j in range(rng.randint(1, 4)):
            label = self.text.chars(rng, rng.randint(6, 24)).strip() or "请选择"
            if rng.random() < 0.7:
                opts = list(rng.choice(_FORM_OPTIONS))
                fields.append({"id": f"q{j + 1}", "label": label, "type": "choice", "options": opts})
                ans = rng.choice(opts)
                lines.append(f"问题{j + 1}：{label}\n选项：{' / '.join(opts)}\n回答：{ans}")
            else:
                fields.append({"id": f"q{j + 1}", "label": label, "type": "text"})
                ans = self.text.chars(rng, rng.randint(4, 60)).strip() or "无"
                lines.append(f"问题{j + 1}：{label}\n回答：{ans}")
        prompt = {"id": "form_" + f"{rng.getrandbits(64):016x}", "title": title, "fields": fields}
        return prompt, "\n\n".join(lines)

    def session(self, plan: _Plan, seed: int) -> tuple[bytes, list[int]]:
        rng = random.Random(f"ccweb-bench-session:{seed}:{plan.sid}")
        target = max(600, plan.target)
        codex = plan.agent == "codex"
        avg = rng.lognormvariate(math.log(MEDIAN_MESSAGE_BYTES * self.uscale), 0.5)
        n_msgs = int(max(2, min(30_000, round(target / max(avg, 60)))))

        # 1. structure: list of [kind, extra]
        kinds: list[list] = []
        form_p = 0.06 if rng.random() < 0.35 else 0.0
        while len(kinds) < n_msgs:
            kinds.append(["user", None])
            if form_p and rng.random() < form_p:
                prompt, answer = self.form(rng)
                kinds.append(["form", prompt])
                kinds.append(["submit", answer])
            if rng.random() < 0.55:
                for _ in range(rng.randint(1, 4)):
                    kinds.append(["tool_use", None])
                    kinds.append(["tool_result", None])
            kinds.append(["assistant", None])
        ends_waiting = rng.random() < 0.06
        if ends_waiting:
            prompt, _ = self.form(rng)
            kinds.append(["form", prompt])

        # 2. byte budget for the bulk (assistant text, tool inputs, tool results)
        user_texts: dict[int, str] = {}
        used = 0
        bulk_w: list[tuple[int, float]] = []
        for i, (kind, extra) in enumerate(kinds):
            if kind == "user":
                t = self.user_text(rng)
                user_texts[i] = t
                used += len(t) * 3
            elif kind == "submit":
                used += len(extra.encode())
            elif kind == "assistant" or kind == "form":
                bulk_w.append((i, rng.lognormvariate(0.0, 0.9)))
            elif kind == "tool_use":
                bulk_w.append((i, 0.25 * rng.lognormvariate(0.0, 0.8)))
            else:
                bulk_w.append((i, 1.6 * rng.lognormvariate(0.0, 1.1)))
        remaining = max(len(bulk_w) * 40, target - used - PER_MESSAGE_OVERHEAD * len(kinds))
        wsum = sum(w for _, w in bulk_w) or 1.0
        budget = {i: max(12, int(remaining * w / wsum)) for i, w in bulk_w}

        # 3. messages
        t_ms = _T0_MS + rng.randrange(0, _SPAN_MS)
        created_ms = t_ms
        msgs: list[dict] = []
        ts_key = "timestamp" if rng.random() < 0.03 else "createdAt"
        numeric_ids = rng.random() < 0.02
        next_num = rng.randrange(1, 10_000)
        pending_tool = None
        text = self.text
        for i, (kind, extra) in enumerate(kinds):
            t_ms += int(rng.lognormvariate(math.log(20_000), 1.2))
            if numeric_ids:
                mid = next_num
                next_num += 1
            else:
                mid = _uuid(rng)
            if kind == "user":
                t = user_texts[i]
                content = t if (codex or rng.random() < 0.7) else [{"type": "text", "text": t}]
                m = {"id": mid, "role": "user", "content": content}
            elif kind == "submit":
                content = extra if rng.random() < 0.8 else [{"type": "text", "text": extra}]
                m = {"id": mid, "role": "user", "content": content}
            elif kind == "assistant":
                t = text.bytes_(rng, budget[i])
                m = {"id": mid, "role": "assistant",
                     "content": t if codex else [{"type": "text", "text": t}]}
            elif kind == "form":
                t = text.bytes_(rng, min(budget[i], 600 * self.uscale + 40))
                m = {"id": mid, "role": "assistant", "content": [{"type": "text", "text": t}],
                     "ccwebPrompt": extra}
            elif kind == "tool_use":
                pending_tool = "toolu_" + f"{rng.getrandbits(96):024x}"
                name = rng.choice(_TOOLS)
                b = budget[i]
                if name == "Bash":
                    inp = {"command": self.code.bytes_(rng, b), "description": text.chars(rng, 12)}
                elif name in ("Edit", "Write"):
                    inp = {"file_path": "/home/dev/project/src/" + f"{rng.getrandbits(32):08x}" + ".py",
                           "content": self.code.bytes_(rng, b)}
                else:
                    inp = {"query": text.bytes_(rng, b)}
                blocks = []
                if rng.random() < 0.5:
                    blocks.append({"type": "text", "text": text.chars(rng, rng.randint(5, 80))})
                blocks.append({"type": "tool_use", "id": pending_tool, "name": name, "input": inp})
                m = {"id": mid, "role": "assistant", "content": blocks}
            else:  # tool_result: no text of its own -> not a user input
                b = budget[i]
                src = self.code if rng.random() < 0.45 else text
                body = src.bytes_(rng, b)
                res = body if rng.random() < 0.8 else [{"type": "text", "text": body}]
                block = {"type": "tool_result", "tool_use_id": pending_tool or "toolu_0", "content": res}
                if rng.random() < 0.04:
                    block["is_error"] = True
                m = {"id": mid, "role": "user", "content": [block]}
            m[ts_key] = _iso(t_ms)
            msgs.append(m)

        # 4. top level
        data = session_document(rng, plan, text, msgs, created_ms, t_ms)
        lengths = [len(t) for t in user_texts.values()] + [len(extra) for k, extra in kinds if k == "submit"]
        return data, lengths


# --------------------------------------------------------------------------- driver

def input_distribution(lengths: list[int]) -> dict:
    """What the user inputs look like, in code points: the figures the docs quote."""
    xs = sorted(lengths)
    if not xs:
        return {"count": 0}

    def pct(q: float) -> int:
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return {
        "count": len(xs), "mean": round(sum(xs) / len(xs), 1), "median": pct(0.5), "p90": pct(0.9),
        "p99": pct(0.99), "max": xs[-1], "over_1000": sum(1 for x in xs if x > 1_000),
        "over_100000": sum(1 for x in xs if x > 100_000),
    }  # fmt: skip


def generate(out_dir, sessions: int, seed: int, scale_bytes: float = 1.0, profile: str = "short") -> dict:
    """Write ``sessions`` session files into ``out_dir``; return the summary dict."""
    if sessions < 1:
        raise ValueError("sessions must be >= 1")
    if not scale_bytes > 0:
        raise ValueError("scale_bytes must be > 0")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}")
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    plans, info = _plan(sessions, seed, scale_bytes)
    pool, code = _build_pools(seed, scale_bytes)
    if profile == "long":
        from bench.corpus_long import LongGen

        gen = LongGen(_Text(pool), _Text(code), scale_bytes, seed)
        info["big"] = None  # no planned ~20 MB session: the largest is whatever the inputs made
    else:
        gen = _Gen(_Text(pool), _Text(code), scale_bytes)
    total = 0
    largest = (-1, "")
    stats: list[tuple[int, int, str]] = []  # (bytes, user inputs, id)
    lengths: list[int] = []
    big_bytes = None
    for p in plans:
        data, input_lengths = gen.session(p, seed)
        n_inputs = len(input_lengths)
        lengths += input_lengths
        with open(os.path.join(out_dir, p.sid + ".json"), "wb") as f:
            f.write(data)
        size = len(data)
        total += size
        if size > largest[0]:
            largest = (size, p.sid)
        if p.sid == info.get("big"):
            big_bytes = size
        stats.append((size, n_inputs, p.sid))
    with_inputs = [s for s in stats if s[1] >= 15] or [max(stats, key=lambda s: (s[1], -s[0]))]
    small = min(with_inputs)
    sizes = sorted(s[0] for s in stats)
    summary = {
        "sessions": sessions,
        "bytes": total,
        "hot_source": info.get("hot"),
        "hot_children": min(HOT_CHILDREN, sessions // 4) if info.get("hot") else 0,
        "three_source": info.get("three"),
        "largest": largest[1],
        "largest_bytes": largest[0],
        "small": small[2],
        "small_bytes": small[0],
        "small_inputs": small[1],
        "median_bytes": sizes[len(sizes) // 2],
        "big20": info.get("big"),
        "big20_bytes": big_bytes,
        "seed": seed,
        "scale_bytes": scale_bytes,
        "profile": profile,
        "inputs": input_distribution(lengths),
    }
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gen_corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="directory to write <id>.json files into")
    ap.add_argument("--scale-bytes", type=float, default=1.0, help="multiply all sizes (e.g. 0.01)")
    ap.add_argument("--profile", choices=PROFILES, default="short",
                    help="short: issue 4's corpus; long: people paste logs and code (issue 12, bench/corpus_long.py)")
    a = ap.parse_args(argv)
    summary = generate(a.out, a.sessions, a.seed, a.scale_bytes, a.profile)
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
