"""The language of an answer: the question's own, Chinese or English, unless a setting says otherwise.

Every sentence that code writes for a user (program/evidence/answer.py, the failure answers) comes
from the table here, in both languages; claim texts and excerpts stay as the LM and the tools wrote
them.
"""

from __future__ import annotations

import os
import re

from signatures.contracts import Language, Verdict

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
        "nothing": "未检索到可以核实的真实证据，无法确认所问的情况。",
        "reason": "原因：证据引用核对未通过（{rules}）。",
        "failed_calls": "以下查询失败，不能作为任何证据：",
        "possible_matches": "但以下日志可能正是所问的内容（未核实，所以不能断定“未找到”）：",
        "unread": "以下查询没有读完其范围内的全部日志，所以它们没有找到的内容不能排除：",
        "unread_line": "- {search}：未读 {places}",
        "not_run": "诊断未运行，没有检查任何证据：{message}",
        "alert_question": "只确认 {service} 是否存在 {alert} 告警",
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
        "nothing": "No real evidence that could be verified was found; what was asked cannot be confirmed.",
        "reason": "Reason: the citations failed the check ({rules}).",
        "failed_calls": "These lookups failed and are evidence of nothing:",
        "possible_matches": "These log lines may be what was asked about (not verified, so \"nothing found\" cannot be stated):",
        "unread": "These searches did not read every line in their scope, so what they did not find is not ruled out:",
        "unread_line": "- {search}: not read: {places}",
        "not_run": "The diagnosis did not run and no evidence was checked: {message}",
        "alert_question": "Only confirm whether {service} has the {alert} alert",
    },
}


def question_language(question: str) -> Language:
    return "zh" if HAN.search(question) else "en"


def answer_language(question: str, setting: str | None = None) -> Language:
    """`setting` (default: DIAGNOSIS_LANGUAGE) is zh, en, or auto/empty for the question's language."""
    choice = (os.environ.get(SETTING, "") if setting is None else setting).strip().lower()
    if choice in TEXT:
        return choice
    if choice not in ("", "auto"):
        raise ValueError(f"{SETTING} must be zh, en or auto, not {choice!r}")
    return question_language(question)


def say(language: Language, key: str, **values: str) -> str:
    return TEXT[language][key].format(**values)


def verdict_text(language: Language, verdict: Verdict) -> str:
    return say(language, "conclusion", verdict=TEXT[language][verdict])
