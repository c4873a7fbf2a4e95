"""Does a piece of tool output address the model? (A prompt-injection detector, one layer of several.)

Tool output quotes users and attackers (feedback text in a log line, a poisoned runbook). It is
data: every prompt delimits it as such and shows no control token raw (tools.recorder.spotlight and
defused), a claim that cites flagged text cannot reach PASS (the gatekeeper makes it low_confid), a
claim or answer sentence that restates an instruction of its evidence is blocked
(`restated_instruction`), and an answer that carries an instruction is replaced.

The detector reads a normalised form of the text (disguises.py's `normalised`: compatibility forms, no invisible
characters, look-alike letters as the Latin ones they imitate, base64 decoded) and looks for what
an instruction to a model does, not for what an operations line says: it overrides the reader's
instructions, asks the reader to say, conclude or mark something, addresses an AI, or imitates this
program's own prompt structure (control tokens, the spotlight tag, observation headers, DSPy's field
headers, its verdict JSON). An order to do something in the world ("You must restart the pod") is operations text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import get_args

from program.evidence.disguises import normalised
from program.evidence.statements import CLAUSE_END
from program.evidence.text_cache import text_cache
from contracts import RAW_PATH_IN_TEXT, Claim, EvidenceBinding, EvidenceStatus, Judgement, Verdict
from tools.functions import TOOLBOX
from tools.recorder import CONTROL_TOKEN, DEFUSED_TOKEN, NO_HIT, SPOTLIGHT_TAG
from tools.text.search import Query, read_line, read_query


# --- what an instruction to a model does -----------------------------------------------------------


def _any(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


# Where an English imperative begins: a clause start, or a softener before the verb.
_START = r"(?:^|(?<=[.!?;:,\"'(\[>—–*-])|\b(?:please|kindly|now|and|then|just|simply|so|also|instead)\b)\s*"
# Who may be told what to say: an AI, or whoever reads or processes the text.
_AI = _any(r"ai|a\.i\.|llms?|large language models?|language models?|chat ?bots?|chatgpt|gpt(?:-?\d\w*)?|claude",
           r"gemini|copilot",
           r"(?:ai|automated|virtual|digital)\s+(?:assistant|agent|reviewer|reader|system|model|tool|analyst)s?",
           r"assistants?|models?|agents?|bots?|verifiers?|gatekeepers?|summari[sz]ers?|auditors?")
_READER = _any(r"whoever\b[^.\n]{0,40}?", r"anyone\b[^.\n]{0,40}?", r"anybody\b[^.\n]{0,40}?",
               r"everyone\b[^.\n]{0,40}?",
               r"the\s+(?:next\s+)?(?:reader|person|program|tool|reviewer|analyst|summari[sz]er|one)s?\b[^.\n]{0,40}?")
_MODAL = _any(r"must", r"should", r"shall", r"needs?\s+to", r"ha(?:ve|s)\s+to", r"(?:are|is)\s+to",
              r"(?:are|is)\s+(?:required|expected|asked|supposed|allowed|authori[sz]ed|permitted)\s+to")
_POLITE = _any(r"please", r"kindly", r"make\s+sure\s+(?:to|that\s+you|you)", r"be\s+sure\s+to", r"remember\s+to",
               r"don't\s+forget\s+to", r"i\s+(?:need|want)\s+you\s+to", r"we\s+need\s+you\s+to", r"you\s+are\s+hereby")
# Acts of saying and of judging: what an instruction needs the reader to do to become a claim or a verdict.
_SAY = _any("say", "state", "write", "report", "answer", "respond", "reply", "output", "return", "print", "conclude",
            "declare", "assert", "claim", "mention", "indicate", "tell", "include", "note down", "summari[sz]e")
_JUDGE = _any("confirm", "approve", "accept", "mark", "label", "flag", "treat", "regard", "consider", "rate", "judge",
              "classify", "verify", "validate", "certify", "deem", "believe", "assume", "trust", "pass")
_VERDICT_WORD = _any("pass", "passed", "supported", "verified", "confirmed", "approved", "grounded", "low_confid",
                     "pre-?approved", "pre-?verified")
_EVIDENCE = _any(r"claims?", r"citations?", r"evidence", r"excerpts?", r"bindings?", r"diagnos[ie]s",
                 r"(?:this|these)\s+(?:log|line|entry|record|message|warning)s?\b")
_CONCLUSION = _any("conclusions?", "answers?", "verdicts?", "diagnos[ie]s", r"root\s+causes?")
_TARGET = _any(_CONCLUSION, "summary", "summaries", "findings?", "judge?ments?")
_RULES = _any(r"instructions?", r"rules?", r"prompts?", r"guidelines?", r"guidance", r"directions?", r"directives?",
              r"orders?", r"constraints?", r"polic(?:y|ies)", r"context", r"checks?", r"guardrails?", r"safeguards?",
              r"programming")
_OVERRIDE = _any(r"ignore", r"disregard", r"forget", r"override", r"bypass", r"discard", r"drop", r"skip",
                 r"set\s+aside", r"abandon", r"neglect", r"overlook", r"do\s+not\s+(?:follow|obey)",
                 r"don't\s+(?:follow|obey)", r"stop\s+following", r"pay\s+no\s+(?:attention|heed)\s+to")
# What a request to say asks to be said: a that-clause right after the verb or after where it goes
# ("write in the summary that"; "report incidents that affect checkout" asks for nothing to be said),
# a verdict ("answer PASS", "say it is confirmed"), or an "as X" of a verdict or of evidence.
_SAID = _any(rf"(?:(?:in|into|to|on|for|within)\s+(?:the\s+|your\s+|an?\s+)?(?:\w+\s+)?{_TARGET}\s+)?that\b",
             r"(?:only\s+)?(?:with\s+)?(?:(?:the\s+)?(?:verdict|result|status|judge?ment)\s*(?:as|is|=|:)?\s*)?"
             rf"(?:(?:it|this|that)\s+(?:is|was)\s+)?[\"']?{_VERDICT_WORD}\b",
             rf"(?:\w+\s+){{0,4}}?as\s+(?:\w+\s+){{0,2}}?(?:{_VERDICT_WORD}|{_EVIDENCE}|true|fact)\b")
# What follows a role marker or a name of an AI when it is spoken to.
_SPOKEN_TO = _any(r"you\b", r"your\b", r"please\b", rf"{_OVERRIDE}\b", r"do\s+not\b", r"don't\b", r"never\b",
                  r"always\b", r"act\s+as\b", r"from\s+now\s+on\b")
_JUDGED = _any(rf"\b{_VERDICT_WORD}\b", rf"\b{_EVIDENCE}")
# A request by its framing: spoken to "you", to a reader, to an AI, or softened by "please".
_REQUEST = _any(rf"\byou\s+{_MODAL}", rf"\b{_READER}\s+{_MODAL}", rf"\b(?:the\s+)?{_AI}\s+{_MODAL}", rf"\b{_POLITE}",
                rf"\bnote\s+to\s+{_READER}[^.\n]{{0,40}}?:")
_ADVERBS = r"(?:(?:now|just|simply|also|only|instead|directly|then)\s+)*"

ENGLISH = [
    # overriding what the reader was told
    rf"{_START}{_OVERRIDE}\b[^.\n]{{0,40}}?\b{_RULES}\b",
    rf"{_START}(?:forget|ignore|disregard)\s+(?:everything|anything)\b",
    rf"\b(?:previous|prior|earlier|above|original|old|your|the|all)\s+"
    rf"(?:instructions?|prompts?|guidelines?|directives?)\s+"
    rf"(?:(?:have|has)\s+(?:changed|been\s+(?:updated|replaced|revoked|superseded|cancell?ed))|(?:are|is)\s+(?:now\s+)?"
    rf"(?:outdated|void|cancell?ed|obsolete|revoked|superseded|no\s+longer\s+valid))",
    r"^\s*instructions?\s+(?:have|has)\s+changed",
    rf"\b(?:do\s+not|don't|never|stop|skip|no\s+need\s+to)\s+(?:the\s+)?"
    rf"(?:verify|verifying|verification|check|checking|validate|validating|cite|citing)\b[^.\n]{{0,30}}?"
    rf"\b(?:{_EVIDENCE}|sources?|step|just|simply)",
    # asking the reader to say, conclude or mark something
    rf"{_REQUEST}\s+{_ADVERBS}{_SAY}\s+(?:{_SAID}|[^.\n]{{0,60}}?(?::\s|\b{_TARGET}\b))",
    rf"{_REQUEST}\s+{_ADVERBS}{_JUDGE}\b[^.\n]{{0,40}}?{_JUDGED}",
    rf"{_START}{_SAY}\s+{_ADVERBS}{_SAID}",
    rf"{_START}(?:say|conclude|declare|assert|tell\s+\w+)\s+(?:that\s+)?(?:[\w-]+\s+){{0,5}}?"
    rf"(?:is|are|was|were|has|have)\b",
    rf"\b(?:the|your)\s+{_TARGET}\s+"
    rf"(?:said|says|stated|states|mentioned|concluded|included|would\s+(?:say|state|read|mention))\b",
    rf"{_START}{_SAY}\s+(?:only\s+)?with\b",
    rf"{_START}{_JUDGE}\s+{_ADVERBS}(?:\w+\s+){{0,4}}?{_JUDGED}",
    rf"{_START}(?:approve|accept|verify|confirm)\s+(?:them\s+)?(?:all|every|each|any)\b",
    rf"\b(?:correct|real|true|final|only|actual|right)\s+{_CONCLUSION}\s+(?:is|are|was|must|should|has|will|=|:)",
    rf"\b{_TARGET}\s+{_MODAL}\s+(?:be|say|state|read|include|mention|contain)\b",
    rf"\b(?:{_EVIDENCE})[^.\n]{{0,40}}?\b(?:are|is|have\s+been|has\s+been)\s+(?:already\s+|all\s+)?{_VERDICT_WORD}\b",
    # addressing an AI
    rf"\b(?:dear|hey|hi|hello|attention|attn|note\s+(?:to|for)|memo\s+to|reminder\s+(?:to|for)|"
    rf"p\.?\s?s\.?(?:\s+(?:to|for))?|(?:new\s+)?instructions?\s+(?:to|for))\s+"
    rf"(?:the\s+|all\s+|any\s+|every\s+|our\s+|an?\s+)?{_AI}\b",
    rf"\bto\s+(?:the|any|every|an?)\s+{_AI}\s+(?:reading|processing|summari[sz]ing|reviewing|analy[sz]ing)\b",
    rf"\bif\s+you\s+are\s+(?:an?\s+)?(?:\w+\s+)?{_AI}\b",
    rf"(?:^|[.!?;\n]\s*){_AI}\s*[,:]\s*{_SPOKEN_TO}",
    rf"\byou\s+are\s+now\s+(?:an?|the|my|in|acting)\b|\bpretend\b|\brole[- ]?play\b|\bfrom\s+now\s+on,?\s+you\b",
    rf"\bact\s+as\s+(?:an?|the|my)\s+(?:\w+\s+)?(?:{_AI}|auditor|judge|expert|administrator|admin)\b",
    rf"\bas\s+(?:an?|the)\s+{_AI}\s*,\s*you\b",
    # role markers and framing of a prompt
    rf"(?:^|\n)\s*(?:#+\s*|\[|<)?\s*(?:system|assistant|developer)\s*(?:\]|>)?\s*"
    rf"(?:prompt|message|instructions?)?\s*:\s*{_SPOKEN_TO}",
    r"\bnew\s+system\s+(?:prompt|message|instructions?)\b|\bsystem\s+prompt\s*:",
    r"<\s*/?\s*(?:system|instructions?|assistant|user|developer|admin)\s*>",
    r"\b(?:begin|end)\s+(?:override|instructions?|system\s+prompt|prompt)\b",
]
SPANISH = [
    r"\b(?:ignora|ignore|ignoren|olvida|olvide|olviden|omite|omita|descarta|descarte)\b[^.\n]{0,40}?"
    r"\b(?:instrucciones|reglas|indicaciones|normas|directrices|ordenes)\b",
    r"\b(?:responde|responda|di|diga|escribe|escriba|indica|indique|informa|informe|concluye|concluya|reporta|reporte|"
    r"afirma|afirme|declara|declare|contesta|conteste)\s+(?:\w+\s+){0,3}?(?:que|pass|aprobado|verificado|confirmado)\b",
    r"\b(?:marca|marque|trata|trate|considera|considere)\b[^.\n]{0,40}?\bcomo\s+(?:verificad|aprobad|confirmad|valid)",
]
FRENCH = [
    r"\b(?:ignore[rz]?|oublie[rz]?|ne\s+tiens?\s+pas\s+compte\s+des?)\b[^.\n]{0,40}?"
    r"\b(?:instructions|consignes|regles|directives|ordres)\b",
    r"\b(?:reponds|repondez|dis|dites|ecris|ecrivez|indique[sz]?|conclus|concluez|signale[sz]?|affirme[sz]?|"
    r"declare[sz]?)\s+(?:\w+\s+){0,3}?(?:que|qu'|pass\b|valide|verifie|confirme)",
]
GERMAN = [
    r"\b(?:ignorier\w*|vergiss\w*|vergessen\s+sie|missachte\w*)\b[^.\n]{0,40}?"
    r"\b(?:anweisungen|regeln|vorgaben|instruktionen|richtlinien|befehle)\b",
    r"\b(?:antworte\w*|sage|sag|sagen\s+sie|schreibe?|schreiben\s+sie|melde|berichte|bestatige|behaupte|erklare)\b"
    r"[^.\n]{0,40}?\b(?:dass|pass|bestanden|bestatigt|verifiziert)\b",
]
PORTUGUESE = [
    r"\b(?:ignore|ignora|esqueca|desconsidere|descarte)\b[^.\n]{0,40}?\b(?:instrucoes|regras|orientacoes|diretrizes)\b",
    r"\b(?:responda|diga|escreva|informe|conclua|afirme|declare)\s+(?:\w+\s+){0,3}?(?:que|pass|aprovado|verificado)\b",
]
RUSSIAN = [
    r"(?:игнорируй\w*|проигнорируй\w*|забудь\w*|не\s+обращай\w*\s+внимания\s+на|отбрось\w*|отмени\w*)[^.\n]{0,40}?"
    r"(?:инструкци\w*|указани\w*|правил\w*|подсказ\w*|промпт\w*|команд\w*)",
    r"(?:ответь\w*|напиши\w*|скажи\w*|сообщи\w*|укажи\w*|подтверди\w*|отметь\w*|сделай\w*\s+вывод)[^.\n]{0,10}?"
    r"(?:\bчто\b|pass\b|:)",
]
JAPANESE = [
    r"(?:指示|命令|ルール|規則|プロンプト|指令|制約)[^。\n]{0,10}?(?:無視|忘れ|破棄)",
    r"(?:と|って)(?:回答|返答|答え|報告|記載|記入|書い|書き|結論|判定|出力|言っ|伝え)[^。\n]{0,6}?(?:ください|下さい|しろ|せよ|なさい)",
    r"(?:結論|回答|答え|判定)(?:に|で|は|を)[^。\n]{0,20}?(?:と(?:書|記|し)|pass|合格|承認)",
]
_ZH_REQUEST = r"(?:请|請|麻烦|麻煩|劳驾|勞駕|烦请|煩請|务必|務必|一定要|必须|必須|记得|記得|帮忙|幫忙|拜托|拜託|直接)"
_ZH_SAY = (r"(?:写上|寫上|写明|寫明|写成|寫成|注明|註明|标注|標註|说明|說明|说|說|回答|答复|答覆|回复|回覆|输出|輸出|报告|報告|"
           r"汇报|匯報|判定|认定|認定|标记|標記|确认|確認|给出|給出|填写|填寫|表述|得出)")
_ZH_TARGET = r"(?:结论|結論|答复|答覆|回答|答案|判定|诊断|診斷|总结|總結|摘要|根因|回复|回覆|输出|輸出)"
CHINESE = [
    r"(?:忽略|无视|無視|忽視|忘掉|忘记|忘記|不要理会|不要理會|别管|別管|不用管|推翻)[^。\n]{0,12}?"
    r"(?:规则|規則|指令|指示|要求|说明|說明|提示|设定|設定|限制)",
    r"(?:跳过|跳過|绕过|繞過|不用|不要|无需|無需|不需要)[^。\n]{0,6}?(?:核验|核驗|验证|驗證|引用|查证|查證|证据|證據)",
    rf"{_ZH_REQUEST}[^。\n]{{0,24}}?{_ZH_TARGET}[^。\n]{{0,8}}?{_ZH_SAY}",
    rf"{_ZH_REQUEST}[^。\n]{{0,12}}?{_ZH_SAY}[^。\n]{{0,12}}?(?:通过|通過|pass|已核实|已核實|已确认|已確認|已验证|已驗證)",
    r"(?:判定|输出|輸出|回答|回复|回覆|返回|结论|結論|答复|标记|標記|认定|認定|视为|視為|当作|當作|当成|當成)[^。\n]{0,6}?"
    r"(?:为|為|是|成)?\s*(?:通过|通過|pass|已核实|已核實|已确认|已確認|已验证|已驗證|supported)",
    r"你现在是|你現在是|作为(?:一个)?(?:ai|人工智能|大模型|模型|助手)|作為(?:一個)?(?:ai|人工智能|大模型|模型|助手)|扮演|"
    r"(?:大)?模型[，,：:]?\s*请|请把这条|請把這條",
    r"系统提示词|系統提示詞|最高优先级指令|最高優先級指令",
    r"(?:你好|您好|注意)[，,]?\s*(?:大)?(?:模型|助手|ai)",
]
LANGUAGES = ENGLISH + SPANISH + FRENCH + GERMAN + PORTUGUESE + RUSSIAN + JAPANESE + CHINESE


def _forged_framing() -> list[str]:
    """This program's own prompt structure, as tool output that forges it would write it: an
    observation head or citation label (tools.recorder), a verdict in the judge's JSON, a claim's
    fields, and the headers agent frameworks put on tool results."""
    tools = "|".join(map(re.escape, TOOLBOX.names))
    # ClaimJudgement's two verdict fields, set to a value its contract allows.
    values = "|".join(map(re.escape, [*get_args(Judgement), *get_args(Verdict)]))
    found = "|".join(s for s in get_args(EvidenceStatus) if s != "failed")
    compound = "|".join(sorted({name for model in (Claim, EvidenceBinding) for name in model.model_fields
                                if "_" in name}))
    return [
        rf"#\d+\s+(?:{tools})\s*\(|#\d+\s+(?:{RAW_PATH_IN_TEXT}|{NO_HIT})|->\s*(?:{found})\b",
        rf"[\"']?(?:judge?ment|verdict)[\"']?\s*[:=]\s*[\"']?(?:{values})\b|[\"'](?:{compound})[\"']\s*:",
        r"(?:^|\n)\s*(?:={2,}|-{2,}|#+|\[|<)\s*/?\s*(?:tool|function)[\s_-]?(?:results?|outputs?|responses?|calls?)\b",
        rf"\b(?:tool|function)_(?:results?|outputs?|responses?)\b|\b{SPOTLIGHT_TAG}\b",
        # DSPy's field headers ([[ ## observations ## ]]): the structure every stage's prompt is written in.
        r"\[\s*\[\s*#{1,3}\s*[^\[\]#\n]{1,60}?\s*#{1,3}\s*\]\s*\]",
    ]


FRAMING = [CONTROL_TOKEN.pattern, DEFUSED_TOKEN.pattern, *_forged_framing()]
DETECTOR = re.compile("|".join(f"(?:{p})" for p in FRAMING + LANGUAGES), re.IGNORECASE | re.MULTILINE)
# A request to say or judge anything at all, without the object that makes it an instruction to a
# model: too broad to flag a line (honest lines ask operators to confirm things), narrow enough to
# keep a claim from repeating what a line asks its reader to say.
REQUEST = re.compile("|".join(f"(?:{p})" for p in (
    rf"{_REQUEST}\s+{_ADVERBS}(?:{_SAY}|{_JUDGE})\b",
    rf"{_ZH_REQUEST}[^。\n]{{0,12}}?{_ZH_SAY}",
    *SPANISH[1:], *FRENCH[1:], *GERMAN[1:], *PORTUGUESE[1:], *RUSSIAN[1:], *JAPANESE[1:])),
    re.IGNORECASE | re.MULTILINE)


@text_cache()
def addresses_the_model(text: str) -> bool:
    return DETECTOR.search(normalised(text)) is not None


def instruction_in(text: str) -> str | None:
    """The first instruction-shaped span of `text` (normalised), for a message an auditor can act on."""
    found = DETECTOR.search(normalised(text))
    return found.group(0).strip() if found else None


# --- a line that tells its reader what to conclude ---------------------------------------------------

# A log line reports what happened in a system; the reading of it (a conclusion, a verdict, what
# counts as evidence) is this program's to make. So a line that speaks of the reading tells its
# reader what to conclude, whatever its wording: it names the outcome of a reading (a conclusion, a
# verdict, evidence), or it gives a verdict's word (passed, verified, 已核实) to itself or to its reader.
_READING = _any(r"\bconclu(?:sions?|ded?|des|ding)\b", r"\bverdicts?\b", r"\bevidences?\b", r"\bdiagnos[ie]s\b",
                r"结论|結論|定论|定論|证据|證據|佐证|佐證|証拠", r"\bconclus(?:ion|iones|ao|oes)\b", r"\bveredi(?:c)?tos?\b",
                r"\bevidencias?\b", r"\bpreuves?\b", r"\bschlussfolgerung\w*|\bfazit\b|\bbeweise?\b",
                r"заключени\w*|вердикт\w*|доказательств\w*")
_GIVEN = _any(r"\b(?:pre-?)?(?:approved|verified|confirmed|validated|certified)\b", r"\bpass(?:ed)?\b", r"\bsupported\b",
              # A state given (已核实, verified), not a request to check (请确认是否需要扩容).
              r"已(?:经|經)?(?:核实|核實|确认|確認|验证|驗證|核准|通过|通過)",
              *(rf"\b{re.escape(value)}\b" for value in (*get_args(Judgement), *get_args(Verdict))))
_TO_WHOM = _any(r"\b(?:this|these|the\s+(?:above|following))\s+(?:log|line|entry|entries|record|message|event|output|text)s?\b",
                r"\byou\b|\byour\b|\breaders?\b|\bwhoever\b|\banyone\b|\bsummar\w+|\breviewers?\b|\bplease\b",
                r"本条|本條|此条|此條|这条|這條|该条|該條|本日志|此日志|该日志|本记录|此记录|以上|上述|以下内容|同事|同学|读者|阅读|总结|请|請")
READING = re.compile(_READING, re.IGNORECASE)
GIVEN, TO_WHOM = re.compile(_GIVEN, re.IGNORECASE), re.compile(_TO_WHOM, re.IGNORECASE)


@text_cache()
def tells_what_to_conclude(text: str) -> str | None:
    """The words by which `text` tells its reader what to conclude, or None: an instruction to a
    model (the detector), words of the reading itself (a conclusion, a verdict, evidence), or a
    verdict's word given to the text itself or to its reader. Read in the detector's normalised
    form, so leetspeak, spaced letters and link targets are read as words."""
    text = normalised(text)
    if found := DETECTOR.search(text) or READING.search(text):
        return found.group(0).strip()
    given, to_whom = GIVEN.search(text), TO_WHOM.search(text)
    return f"{to_whom.group(0)} … {given.group(0)}" if given and to_whom else None


def rests_on_direction(cited_texts: list[str]) -> str | None:
    """Why a claim whose every cited line tells its reader what to conclude cannot stand on them, or
    None: such a line is no evidence of the conclusion it asks for, however the claim is worded."""
    found = [tells_what_to_conclude(text) for text in cited_texts]
    if not found or not all(found):
        return None
    return (f"rests only on lines that tell their reader what to conclude ({found[0]!r} in {cited_texts[0][:120]!r}); "
            "such a line is no evidence of that conclusion")


# --- an instruction never becomes a claim or an answer sentence --------------------------------------

# The share of a claim's concepts (tools.text.search: synonym groups, names, words) that a line holding an
# instruction must contain for the claim to restate it.
RESTATED_SHARE = 0.5


@dataclass(frozen=True)
class Restated:
    span: str  # the words of the cited text the instruction covers
    instruction: str  # the words that make it an instruction


@text_cache()
def _instructions(text: str) -> tuple[Restated, ...]:
    """Each instruction in `text` with the words it covers: all of a text the detector flags (an
    injection's payload may come before it, after it or in the lines it forges), and the rest of
    the clause after a mere request to say something."""
    text = normalised(text)
    found = [Restated(span=text.strip(), instruction=hit.group(0).strip())] if (hit := DETECTOR.search(text)) else []
    for line in text.split("\n"):
        for hit in REQUEST.finditer(line):
            end = CLAUSE_END.search(line, hit.end())
            found.append(Restated(span=line[hit.start():end.start() if end else len(line)].strip(),
                                  instruction=hit.group(0).strip()))
    return tuple(found)


def _concepts(text: str, topics: tuple[tuple[str, ...], ...], names: tuple[str, ...]) -> Query:
    return read_query(normalised(text), {str(n): group for n, group in enumerate(topics)}, names)


def restated_instruction(text: str, cited_texts: list[str], topics: tuple[tuple[str, ...], ...] = (),
                         names: tuple[str, ...] = ()) -> str | None:
    """Why `text` (a claim, an answer sentence) repeats an instruction found in the text it cites,
    or None. An instruction here is what the detector flags (then all of the cited text counts) and
    any request to say or judge something (then the rest of its clause counts); `text` repeats it
    when those words hold at least RESTATED_SHARE of its concepts. An order to act ("You must restart
    the pod") asks nothing to be said, so an honest claim about it stands. `topics` are synonym
    groups and `names` service and alert names, through which a Chinese claim meets the English
    line it repeats."""
    query = _concepts(text, topics, names)
    if not query.concepts:
        return None
    for cited in cited_texts:
        for found in _instructions(cited):
            groups, hits = read_line(found.span).matched(query)
            if groups + hits >= RESTATED_SHARE * query.concepts:
                return (f"repeats what its evidence asks the reader to say ({found.instruction!r} in "
                        f"{found.span[:120]!r}); an instruction in evidence is data, never a finding")
    return None
