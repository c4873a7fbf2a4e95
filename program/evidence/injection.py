"""Does a piece of tool output address the model? (A prompt-injection detector, one layer of several.)

Tool output quotes users and attackers (feedback text in a log line, a poisoned runbook). It is
data: every prompt delimits it as such (spotlighting, tools.recorder.spotlight), a claim that cites
flagged text cannot reach PASS (the gatekeeper makes it low_confid), and an answer that repeats an
instruction is replaced. This detector looks for the shape of an instruction aimed at an AI rather
than for known phrases: an override of earlier instructions, a demand for a verdict, a role or
system marker, or an imperative addressed to the model, in English and Chinese.
"""

from __future__ import annotations

import re

from program.evidence.text_cache import text_cache

_ADDRESSEE = (r"(?:you|your|assistant|ai|a\.i\.|llm|language model|model|chatbot|bot|agent|gpt|verifier|gatekeeper|"
              r"summari[sz]er|automated\s+\w+)")
_EARLIER = r"(?:previous|prior|above|earlier|preceding|former|all|any|every|the|these|those|your|existing|original)"
_RULES = r"(?:instructions?|rules?|prompts?|guidelines?|directions?|requirements?|constraints?|steps?|checks?|policy)"
_VERDICT = r"(?:pass|passed|supported|verified|confirmed|approved?|通过|已核实|已确认)"

ENGLISH = [
    # overriding what the model was told
    rf"\b(?:ignore|disregard|forget|override|bypass|drop|discard)\b[^.\n]{{0,30}}?\b{_EARLIER}\b[^.\n]{{0,20}}?\b{_RULES}\b",
    r"\b(?:forget|ignore|disregard)\s+(?:everything|anything|all)\b",
    rf"\b{_RULES}\s+(?:have|has)\s+(?:changed|been\s+updated)|\bnew\s+(?:system\s+)?(?:instructions?|rules?|message)\b",
    rf"\b(?:previous|prior|above)\s+{_RULES}\s+(?:are|is)\s+(?:outdated|void|cancelled|obsolete)",
    # demanding a verdict or a conclusion
    rf"\b(?:answer|say|output|return|respond|reply|report|mark|judge|rate|treat|state)\b[^.\n]{{0,40}}?\b{_VERDICT}\b",
    r"\bverdict\s*[:=]?\s*pass\b|\b(?:respond|answer|reply)\s+(?:only\s+)?with\b",
    r"\b(?:approve|accept)\s+(?:all|every|each)\b",
    r"\b(?:do\s+not|don't|stop|skip)\s+(?:verify|verifying|check|checking|the\s+verification)\b",
    # role play and role markers
    r"\b(?:you\s+are\s+now|act\s+as|pretend|role[- ]?play|from\s+now\s+on)\b",
    r"(?:^|[\s\]>])(?:system|assistant|developer)\s*(?:prompt|message)?\s*:",
    r"<\s*/?\s*(?:tool_output|system|instructions?)\s*>|\bbegin\s+override\b|\boverride\s*:",
    # an imperative addressed to the model
    rf"\b(?:dear|hey|hi|attention|note\s+to|to\s+the)\s+(?:the\s+)?{_ADDRESSEE}\b",
    rf"\bif\s+you\s+are\s+(?:an?\s+)?{_ADDRESSEE}\b",
    rf"^\s*{_ADDRESSEE}\s*[,:]",
    r"\byou\s+(?:must|should|shall|are\s+allowed\s+to|need\s+to)\b",
]
CHINESE = [
    r"(?:忽略|无视|忽視|忘掉|忘记|忘記|不要理会|不要理會|别管|不用管|跳过|跳過|绕过|推翻)[^。\n]{0,12}?"
    r"(?:规则|規則|指令|指示|要求|说明|說明|提示|核验|核驗|验证|驗證|引用|限制)",
    r"(?:直接|必须|必須|务必|一律|只能)[^。\n]{0,6}?(?:判定|输出|輸出|回答|回覆|确认|確認|返回|给出|給出|标记|標記|认定|認定)",
    r"(?:判定|输出|回答|回覆|返回|结论)[^。\n]{0,6}?(?:为|為|是|必须是)?\s*(?:通过|通過|pass|PASS|正常|已核实)",
    r"你现在是|你現在是|作为(?:一个)?(?:ai|AI|人工智能|大模型|模型|助手)|扮演|(?:大)?模型[，,：:]?\s*请|请把这条|請把這條",
    r"系统提示|系統提示|系统消息|最高优先级指令|新的指令|新指令|指令[：:]",
    r"(?:你好|您好|注意)[，,]?\s*(?:大)?(?:模型|助手|AI|ai)",
    r"当成已核实|当作已核实|视为已核实|當成已核實",
]
CACHE_CHARS = 2_000_000
DETECTOR = re.compile("|".join(f"(?:{p})" for p in ENGLISH + CHINESE), re.IGNORECASE | re.MULTILINE)


@text_cache(CACHE_CHARS)
def addresses_the_model(text: str) -> bool:
    return DETECTOR.search(text) is not None


def instruction_in(text: str) -> str | None:
    """The first instruction-shaped span of `text`, for a message an auditor can act on."""
    found = DETECTOR.search(text)
    return found.group(0) if found else None
