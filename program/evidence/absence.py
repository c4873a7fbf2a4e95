"""What a statement says when it says that nothing was found or that something does not exist."""

from __future__ import annotations

import re

from program.evidence.characters import NEGATION_WORDS
from program.evidence.statements import CLAUSE_END

# A claim that something was not found or does not exist, read from what its negation scopes over.
# A verbal negation (未, 没有, not, didn't, cannot) negates the predicate it stands before, across
# only a place ("未在日志中找到") or an auxiliary ("has not been found"): when that predicate is a
# verb of finding or of existing, or the verb's own potential form ("找不到", "查不到"), the claim
# says nothing was found. A determiner ("no", 没有 before a noun) negates a thing: the claim denies
# that it exists when its clause goes on to say it was not found ("No … were found"), names a record
# the tools return ("没有连接池耗尽的日志", "has no 5xx errors"), or it stands before a name or a quoted
# value ("没有 HighCPUUsage 告警"). A negated state is no absence: "连接池没有耗尽", "is not
# exhausted (as the stats show)" observe the state a found line shows, which the verifier judges.
_CLAUSE = rf"(?:(?!{CLAUSE_END.pattern}|[:：]).)*?"
# How far 没有 reaches for the record it denies (its noun phrase, "没有 X 的日志").
_NEAR = r"[^，。；！？,;!?\n:：]{0,24}?"
_NEGATION_ZH = r"(?:并未|从未|未能|没能|没有|未|没|无(?![法需论]))\s*(?:再次?|曾经?)?"
_PLACE_ZH = r"(?:在[^，。；！？,;!?\n]{0,24}?[中里内上])?\s*"
_DENIED_ZH = r"(?:没有|无(?![法需论]))"
_FINDING_ZH = r"(?:检索到|找到|发现|查询?到|搜到|搜索到|匹配到?|出现|记录到|看到|看见|检测到|观察到|存在|包含)"
_POTENTIAL_ZH = r"(?:检索|找|查|搜|搜索|匹配|看|检测|观察)(?:不到|不着|不见)"
_RECORDED_ZH = r"(?:日志|记录|告警|报警|警报|错误|异常|报错|事件|结果|证据)"
# A record as the place of what is denied: "日志中没有连接池耗尽" (in the logs there is none).
_IN_RECORD_ZH = rf"{_RECORDED_ZH}\s*(?:中|里|内)\s*(?:也|都|均|并)?\s*{_DENIED_ZH}"
_DETERMINERS = ("no", "none", "nothing", "neither", "nor", "non", "without")
_NEGATION_EN = r"\b(?:" + "|".join(re.escape(w) for w in sorted(NEGATION_WORDS - set(_DETERMINERS), key=len, reverse=True)) + \
    r"|unable\s+to|failed\s+to)\s+(?:(?:be|been|being|yet|ever|even|actually|currently|able\s+to)\s+)*"
# "appear" followed by "to" or "as" is a copula ("does not appear to be exhausted"), no verb of presence.
_FINDING_EN = (r"(?:find|found|see|seen|detect(?:ed)?|observe[ds]?|locate[ds]?|match(?:ed)?|identif(?:y|ied)|"
               r"exists?|present|appear(?:s|ed)?(?!\s+(?:to|as)\b)|occur(?:s|red)?|show(?:s|n)?|contains?|"
               r"mention(?:s|ed)?)\b")
_FOUND_EN = r"\s(?:found|matched|exists?|present|seen|detected|observed|located|identified|logged|mention(?:s|ed)?)\b"
ABSENCE = re.compile(rf"{_NEGATION_ZH}{_PLACE_ZH}{_FINDING_ZH}|{_POTENTIAL_ZH}|{_IN_RECORD_ZH}|不存在|并无|无相关|无任何|"
                     rf"没有(?:任何|相关)|"
                     rf"{_DENIED_ZH}\s*(?=[A-Za-z0-9\"'“‘「『《])|{_DENIED_ZH}{_NEAR}{_RECORDED_ZH}|"
                     rf"{_NEGATION_EN}{_FINDING_EN}|\b(?:no|none)\b(?!\s+longer){_CLAUSE}{_FOUND_EN}|"
                     r"\b(?:has|have|had)\s+no\b(?!\s+longer)|\bnothing\b|\bthere(?:'s|\s+(?:is|are|was|were))\s+no\b|"
                     r"\bthere\s+(?:isn't|aren't|wasn't|weren't)\s+any\b|\bno evidence\b|\b(?:does|do|did)\s*n[o']t\s+have\b",
                     re.IGNORECASE)
