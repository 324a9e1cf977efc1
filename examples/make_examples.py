"""Write the hand-readable example sessions in examples/sessions/ (deterministic).

    python examples/make_examples.py

The files are committed; re-running this script rewrites them byte for byte.
They show every case the two tools care about:

- orchestrator.json: the source conversation (claude): English and Chinese inputs, one
  with emoji, one ~700 code points long (the default 1000-code-point budget cuts it),
  a guided form (assistant card with ``ccwebPrompt`` + the user's submission, which
  counts) and a tool-result-only user message (which does not count);
- worker-api.json / worker-ui.json / worker-docs.json: its three MCP children
  (explicit status "Running " -> running; pending ccwebPrompt card -> waiting; idle);
- branch-of-orchestrator.json: a branch of it (not a child);
- grandchild.json: an MCP child of worker-api (not a direct child of orchestrator);
- cjk-notes.json: Chinese/Japanese inputs with emoji (ZWJ family, flags), no
  createdFrom, createdAt in epoch milliseconds, updatedAt with a +08:00 offset.
"""

from __future__ import annotations

import json
import pathlib

OUT = pathlib.Path(__file__).resolve().parent / "sessions"
SRC = "orchestrator"


def text(t: str) -> list[dict]:
    return [{"type": "text", "text": t}]


def msg(mid: str, role: str, content, at: str, **extra) -> dict:
    m = {"id": mid, "role": role, "content": content, "createdAt": at}
    m.update(extra)
    return m


LONG_FEEDBACK = (
    "下面是本周客户反馈的汇总，请按优先级整理成任务，并标出哪些属于 API、哪些属于 UI、哪些只需要改文档：\n"
    "1. 账单页面在月底加载很慢，有客户说要等十几秒才出来，尤其是发票超过两百张的账户。"
    "\n"
    "2. 退款接口返回的错误信息不统一，有时是中文有时是英文，前端没法根据错误码做提示，"
    "希望所有错误都有稳定的 code 字段，并且在文档里列出每个错误码的含义和处理建议。\n"
    "3. 企业客户希望能按部门拆分账单，至少支持三级部门，并且可以给每个部门单独设置付款方式和抄送邮箱。\n"
    "4. 发票抬头修改后，历史发票的 PDF 还是旧抬头，财务同事需要手动重新生成，这个流程很容易出错，"
    "希望改成修改后自动提示是否重新生成最近三个月的发票。\n"
    "5. The invoice email sometimes arrives twice: the retry does not check whether the first send "
    "succeeded.\n"
    "6. 移动端的金额输入框不支持千分位，输入大额数字时很容易看错位数，最好在失焦后自动格式化，"
    "同时保留用户原始输入以便撤销。\n"
    "7. 有两个客户提到时区问题：账单周期按 UTC 计算，但他们在东八区，月初第一天的消费被算到了上个月，"
    "需要支持按账户时区切分账单周期，并在页面上明确显示当前使用的时区。\n"
    "8. 文档里的示例代码还在用 v1 的字段名，新接入的开发者照着写会直接报错，"
    "请在 v2 发布前把所有示例更新一遍，并加一个从 v1 迁移到 v2 的对照表。\n"
    "9. 最后，请估算一下每一项大概需要多少工作量，优先处理影响付款和对账的问题，其余的可以放到下个版本。"
)

RELEASE_FORM = {
    "title": "发布前确认 / Release checklist",
    "fields": [
        {"id": "env", "label": "部署到哪个环境？", "type": "choice", "options": ["staging", "production"]},
        {"id": "migrate", "label": "Run the database migration now?", "type": "choice",
         "options": ["Yes", "No, later"]},
        {"id": "notes", "label": "备注 / Notes", "type": "text"},
    ],
}
RELEASE_ANSWER = (
    "发布前确认 / Release checklist\n"
    "1. 部署到哪个环境？ (staging / production)\n   → staging\n"
    "2. Run the database migration now? (Yes / No, later)\n   → No, later\n"
    "3. 备注 / Notes\n   → 先在 staging 跑一晚，明早看监控再决定。"
)


def orchestrator() -> dict:
    return {
        "title": "Billing v2 / 账单 v2 发布",
        "agent": "claude",
        "createdAt": "2026-11-27T01:00:00.000Z",
        "updatedAt": "2026-11-28T12:30:00.000Z",
        "messages": [
            msg("o-01", "user",
                "Plan the v2 release of the billing service: split the work into API, UI and docs, "
                "and start one worker conversation for each so they can run in parallel.",
                "2026-11-27T01:00:00.000Z"),
            msg("o-02", "assistant", [
                {"type": "text", "text": "Starting three workers."},
                {"type": "tool_use", "id": "toolu_01", "name": "start_workers", "input": {"count": 3}},
            ], "2026-11-27T01:00:20.000Z"),
            msg("o-03", "user", [
                {"type": "tool_result", "tool_use_id": "toolu_01",
                 "content": "Created worker-api, worker-ui, worker-docs."},
            ], "2026-11-27T01:00:25.000Z"),
            msg("o-04", "assistant", text("Workers are running."),
                "2026-11-27T01:00:30.000Z"),
            msg("o-05", "user", LONG_FEEDBACK, "2026-11-27T03:10:00.000Z"),
            msg("o-06", "assistant", text("已按 API / UI / 文档分组。"),
                "2026-11-27T03:12:00.000Z"),
            msg("o-07", "user", text("请把 API 的错误码统一成 snake_case，并让 worker-docs 在文档里列出每个错误码。"),
                "2026-11-27T06:40:00.000Z"),
            msg("o-08", "assistant", text("在发布之前，请确认以下几项："),
                "2026-11-28T09:00:00.000Z", ccwebPrompt=RELEASE_FORM),
            msg("o-09", "user", RELEASE_ANSWER, "2026-11-28T09:05:00.000Z"),
            msg("o-10", "assistant", text("收到。"), "2026-11-28T09:06:00.000Z"),
            msg("o-11", "user",
                "worker-ui 说金额输入框的千分位格式化已经做完了, but please double-check the "
                "mobile layout on small screens before we merge, 尤其是 iPhone SE 的宽度。",
                "2026-11-28T11:00:00.000Z"),
            msg("o-12", "assistant", text("No overflow at 320 px."),
                "2026-11-28T11:20:00.000Z"),
            msg("o-13", "user", "Looks great 🎉 ship it to staging tonight 🚀 辛苦了大家 👍",
                "2026-11-28T12:29:00.000Z"),
            msg("o-14", "assistant", text("Deploying."), "2026-11-28T12:30:00.000Z"),
        ],
    }


def worker_api() -> dict:
    return {
        "title": "API: error codes and refunds",
        "agent": "claude",
        "status": "Running ",
        "createdAt": "2026-11-27T01:00:22.000Z",
        "updatedAt": "2026-11-28T10:15:00.000Z",
        "createdFrom": {"kind": "mcp", "sourceSessionId": SRC, "toolUseId": "toolu_01"},
        "messages": [
            msg("a-01", "user", "Unify the refund API error codes as snake_case and return a stable `code` field.",
                "2026-11-27T01:00:22.000Z"),
            msg("a-02", "assistant", text("Renamed 14 error codes; starting a helper for the OpenAPI spec."),
                "2026-11-27T02:30:00.000Z"),
            msg("a-03", "user", "好的，旧的错误码保留一个版本的兼容期。", "2026-11-28T10:10:00.000Z"),
            msg("a-04", "assistant", text("已加兼容映射，正在跑测试……"), "2026-11-28T10:15:00.000Z"),
        ],
    }


def worker_ui() -> dict:
    return {
        "title": "UI: amount input and billing page",
        "agent": "codex",
        "createdAt": "2026-11-27T01:00:23.000Z",
        "updatedAt": "2026-11-28T11:40:00.000Z",
        "createdFrom": {"kind": "mcp", "sourceSessionId": SRC, "toolUseId": "toolu_01"},
        "messages": [
            msg("u-01", "user", "金额输入框支持千分位，失焦后自动格式化。", "2026-11-27T01:00:23.000Z"),
            msg("u-02", "assistant", "Done: formatting on blur, raw value kept for undo.",
                "2026-11-27T05:00:00.000Z"),
            msg("u-03", "user", "账单页面超过 200 张发票时改成分页。", "2026-11-28T11:30:00.000Z"),
            msg("u-04", "assistant", "分页有两种做法，请选择：", "2026-11-28T11:40:00.000Z",
                ccwebPrompt={"id": "form-paging", "title": "分页方式",
                             "fields": [{"id": "mode", "label": "用哪种分页？", "type": "choice",
                                         "options": ["页码分页", "无限滚动"]}]}),
        ],
    }


def worker_docs() -> dict:
    return {
        "title": "Docs: v1 → v2 migration guide",
        "agent": "claude",
        "createdAt": "2026-11-27T01:00:24.000Z",
        "updatedAt": "2026-11-28T09:30:00.000Z",
        "createdFrom": {"kind": "mcp", "sourceSessionId": SRC, "toolUseId": "toolu_01"},
        "messages": [
            msg("d-01", "user", "Update every code sample to the v2 field names and add a v1 → v2 table.",
                "2026-11-27T01:00:24.000Z"),
            msg("d-02", "assistant", text("Updated 23 samples and added the mapping table."),
                "2026-11-28T09:30:00.000Z"),
        ],
    }


def branch() -> dict:
    return {
        "title": "Billing v2 release (branch: try production first)",
        "agent": "claude",
        "createdAt": "2026-11-28T09:10:00.000Z",
        "updatedAt": "2026-11-28T09:20:00.000Z",
        "createdFrom": {"kind": "branch", "sourceSessionId": SRC},
        "messages": [
            msg("b-01", "user", "What if we deploy straight to production instead?", "2026-11-28T09:10:00.000Z"),
            msg("b-02", "assistant", text("Riskier: the migration has not run on staging yet."),
                "2026-11-28T09:20:00.000Z"),
        ],
    }


def grandchild() -> dict:
    return {
        "title": "OpenAPI spec for the new error codes",
        "agent": "claude",
        "createdAt": "2026-11-27T02:30:10.000Z",
        "updatedAt": "2026-11-27T04:00:00.000Z",
        "createdFrom": {"kind": "mcp", "sourceSessionId": "worker-api"},
        "messages": [
            msg("g-01", "user", "Regenerate openapi.yaml with the snake_case error codes.",
                "2026-11-27T02:30:10.000Z"),
            msg("g-02", "assistant", text("openapi.yaml regenerated; 14 codes documented."),
                "2026-11-27T04:00:00.000Z"),
        ],
    }


def cjk_notes() -> dict:
    return {
        "title": "旅行メモ / 旅行笔记",
        "agent": "claude",
        "createdAt": 1795680000000,  # 2026-11-26T08:00:00.000Z as epoch milliseconds
        "updatedAt": "2026-11-29T16:00:00.000+08:00",  # = 2026-11-29T08:00:00.000Z
        "messages": [
            msg("c-01", "user", "下个月全家去东京 👨‍👩‍👧‍👦，帮我列一个五天的行程。", "2026-11-26T08:00:00.000Z"),
            msg("c-02", "assistant", text("好的，先确认一下出发城市和预算。"), "2026-11-26T08:00:30.000Z"),
            msg("c-03", "user", "从上海出发 🇨🇳 → 🇯🇵，预算两万元左右。", "2026-11-26T08:05:00.000Z"),
            msg("c-04", "assistant", text("行程草稿已生成。"), "2026-11-26T08:06:00.000Z"),
            msg("c-05", "user", "浅草寺と上野公園は同じ日に行けますか？😊", "2026-11-29T07:58:00.000Z"),
            msg("c-06", "assistant", text("はい、徒歩と電車で半日で回れます。"), "2026-11-29T08:00:00.000Z"),
        ],
    }


FILES = {
    "orchestrator": orchestrator,
    "worker-api": worker_api,
    "worker-ui": worker_ui,
    "worker-docs": worker_docs,
    "branch-of-orchestrator": branch,
    "grandchild": grandchild,
    "cjk-notes": cjk_notes,
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    assert 650 <= len(LONG_FEEDBACK) <= 750, len(LONG_FEEDBACK)
    for sid, make in FILES.items():
        data = json.dumps(make(), ensure_ascii=False, indent=2) + "\n"
        (OUT / f"{sid}.json").write_text(data, encoding="utf-8", newline="\n")


if __name__ == "__main__":
    main()
