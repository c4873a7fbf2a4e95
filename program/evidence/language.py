"""The language of an answer: the question's own, Chinese or English, unless a setting says otherwise.

Every sentence that code writes for a user (program/evidence/answer.py, the failure answers) comes
from the table here, in both languages; claim texts and excerpts stay as the LM and the tools wrote
them.
"""

from __future__ import annotations

import re

from contracts import Language, Verdict
from contracts.settings import value_or_default

SETTING = "DIAGNOSIS_LANGUAGE"
# Han characters: a question that has any is answered in Chinese.
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

TEXT: dict[Language, dict[str, str]] = {
    "zh": {
        "conclusion": "结论：{verdict}。",
        "PASS": "证据核实通过",
        "LOW_CONFID": "证据不足，以下结论置信度低",
        "REJECT": "证据引用未通过核对，结论被拒绝",
        "excluded_note": "（涉及用户排除主题的已核实内容未列出。）",
        "verified": "已核实：",
        "verified_line": "- {claim}（依据：{excerpts}）",
        "excerpt_join": "；",
        "no_hit_line": "- 未检索到真实证据：{search}",
        "negative_line": "- {sentence}",
        "nothing": "未检索到可以核实的真实证据，无法确认所问的情况。",
        "found_unverified": "查询找到了证据，但没有一条结论通过核实，所以无法确认所问的情况。找到的证据如下（未核实）：",
        "found_none_shown": "查询找到了证据，但没有一条结论通过核实，所以无法确认所问的情况。",
        "found_set_aside": "查询找到的证据都不是关于所问内容的（其他服务、告警或接口，告警的早先状态，或用户排除的内容），"
                           "已由代码搁置，所以无法确认所问的情况。",
        "reason": "原因：证据引用核对未通过（{rules}）。",
        "failed_calls": "以下查询失败，不能作为任何证据：",
        "possible_matches": "但以下日志可能正是所问的内容（未核实，所以不能断定“未找到”）：",
        "unread": "以下查询没有读完其范围内的全部日志，所以它们没有找到的内容不能排除：",
        "unread_line": "- {search}：未读 {places}",
        "not_run": "诊断未运行，没有检查任何证据：{message}",
        "alert_question": "只确认 {service} 是否存在 {alert} 告警",
        "quoted": "证据显示：{quote}",
    },
    "en": {
        "conclusion": "Conclusion: {verdict}.",
        "PASS": "the evidence was verified",
        "LOW_CONFID": "the evidence is insufficient; what follows is low confidence",
        "REJECT": "the citations failed the check; the conclusion is rejected",
        "excluded_note": "(Verified findings about topics you excluded are not listed.)",
        "verified": "Verified:",
        "verified_line": "- {claim} (evidence: {excerpts})",
        "excerpt_join": "; ",
        "no_hit_line": "- No real evidence found: {search}",
        "negative_line": "- {sentence}",
        "nothing": "No real evidence that could be verified was found; what was asked cannot be confirmed.",
        "found_unverified": "The lookups found evidence, but no conclusion drawn from it was verified, so what was asked "
                            "cannot be confirmed. What they found (not verified):",
        "found_none_shown": "The lookups found evidence, but no conclusion drawn from it was verified, so what was asked "
                            "cannot be confirmed.",
        "found_set_aside": "Everything the lookups found was about something other than what was asked (another "
                           "service, alert or endpoint, an alert's earlier state, or what was excluded), and code set "
                           "it aside, so what was asked cannot be confirmed.",
        "reason": "Reason: the citations failed the check ({rules}).",
        "failed_calls": "These lookups failed and are evidence of nothing:",
        "possible_matches": "These log lines may be what was asked about (not verified, so \"nothing found\" cannot be stated):",
        "unread": "These searches did not read every line in their scope, so what they did not find is not ruled out:",
        "unread_line": "- {search}: not read: {places}",
        "not_run": "The diagnosis did not run and no evidence was checked: {message}",
        "alert_question": "Only confirm whether {service} has the {alert} alert",
        "quoted": "The evidence shows: {quote}",
    },
}


# What a search that found nothing verified, as a sentence: by the output it searched (a tool
# declaration's `items`) and the arguments it was called with. A call with an argument no template
# names is said as the call itself ("no_hit_line"), so no sentence leaves out what was searched.
NO_HIT: dict[Language, dict[tuple[str, frozenset[str]], str]] = {
    "zh": {
        ("alerts", frozenset({"service", "alert_name"})): "{service} 没有 {alert_name} 告警（查询未找到）",
        ("alerts", frozenset({"service", "alert_name", "state"})): "{service} 没有状态为 {state} 的 {alert_name} 告警（查询未找到）",
        ("alerts", frozenset({"service"})): "{service} 没有告警（查询未找到）",
        ("alerts", frozenset({"service", "state"})): "{service} 没有状态为 {state} 的告警（查询未找到）",
        ("alerts", frozenset({"alert_name"})): "没有任何服务有 {alert_name} 告警（查询未找到）",
        ("logs", frozenset({"query", "service"})): "{service} 的日志中没有与“{query}”匹配的记录（检索未找到）",
        ("logs", frozenset({"query", "service", "level"})): "{service} 的日志中没有与“{query}”匹配的 {level} 记录（检索未找到）",
        ("logs", frozenset({"query"})): "日志中没有与“{query}”匹配的记录（检索未找到）",
        ("evidence_blocks", frozenset({"query"})): "知识库中没有与“{query}”匹配的内容（检索未找到）",
    },
    "en": {
        ("alerts", frozenset({"service", "alert_name"})): "{service} has no {alert_name} alert (the lookup found none)",
        ("alerts", frozenset({"service", "alert_name", "state"})): "{service} has no {alert_name} alert in state {state} "
                                                                   "(the lookup found none)",
        ("alerts", frozenset({"service"})): "{service} has no alert (the lookup found none)",
        ("alerts", frozenset({"service", "state"})): "{service} has no alert in state {state} (the lookup found none)",
        ("alerts", frozenset({"alert_name"})): "No service has a {alert_name} alert (the lookup found none)",
        ("logs", frozenset({"query", "service"})): "{service}'s logs have no line matching '{query}' (the search found none)",
        ("logs", frozenset({"query", "service", "level"})): "{service}'s logs have no {level} line matching '{query}' "
                                                            "(the search found none)",
        ("logs", frozenset({"query"})): "No log line matches '{query}' (the search found none)",
        ("evidence_blocks", frozenset({"query"})): "No runbook matches '{query}' (the lookup found none)",
    },
}
# Arguments that only cap how many results come back: a search that found nothing found nothing whatever its cap.
CAPS = frozenset({"limit", "top_k"})


def no_hit_sentence(language: Language, items: str, arguments: tuple[tuple[str, object], ...]) -> str | None:
    """What a verified search that found nothing says, or None when no template names every argument it was given."""
    given = {name: value for name, value in arguments if value not in (None, "") and name not in CAPS}
    template = NO_HIT[language].get((items, frozenset(given)))
    return template.format(**{name: str(value) for name, value in given.items()}) if template else None


def question_language(question: str) -> Language:
    return "zh" if HAN.search(question) else "en"


def answer_language(question: str, setting: str | None = None) -> Language:
    """`setting` (default: DIAGNOSIS_LANGUAGE) is zh, en, or auto/empty for the question's language."""
    choice = (value_or_default(SETTING) if setting is None else setting).strip().lower()
    if choice in TEXT:
        return choice
    if choice not in ("", "auto"):
        raise ValueError(f"{SETTING} must be zh, en or auto, not {choice!r}")
    return question_language(question)


def say(language: Language, key: str, **values: str) -> str:
    return TEXT[language][key].format(**values)


def verdict_text(language: Language, verdict: Verdict) -> str:
    return say(language, "conclusion", verdict=TEXT[language][verdict])
