"""A resource said to be at its limit, against the evidence that measures it.

"ledger-service 的连接池已耗尽：active=14/50, waiting=0" was verified by the 1.5B verifier on the
healthy pool line it cites: the claim copies the line's figures and says the opposite of them. Code
can read that much: a claim that asserts exhaustion (耗尽, used up, exhausted, at capacity), where
every measure the cited lines give in the form used/limit is below its limit and no cited line
says the resource is exhausted in words, contradicts its evidence. A measure at its limit
(active=50/50, 3/3 retries), a line that says "exhausted" itself, a hedged or denied claim
("接近耗尽", "not exhausted", "是否耗尽") and evidence with no used/limit measure at all are left to
the verifier.
"""

from __future__ import annotations

import re

from program.evidence.statements import CLAUSE_END, NEGATION, statement_form

# A resource at its limit. "full" only as a state ("is full", "已满"), never in "Full GC".
AT_LIMIT = re.compile(r"耗尽|用尽|用完|用光|已满|占满|打满|满载|枯竭|"
                      r"\b(?:exhaust(?:ed|ion|s)?|depleted|saturated|maxed(?:\s+out)?|at\s+(?:full\s+)?capacity|"
                      r"at\s+(?:its|the)\s+limit|ran\s+out|(?:is|are|was|were|be)\s+full)\b", re.IGNORECASE)
# What makes an at-limit word no assertion in its clause: nearness, likelihood, a question.
NOT_ASSERTED = re.compile(r"接近|快要|即将|将要|几乎|趋于|可能|或将|是否|有无|"
                          r"\b(?:nearly|almost|close\s+to|approaching|near|about\s+to|likely|may|might|could|"
                          r"risk|whether|if|running\s+out)\b", re.IGNORECASE)
# used/limit with the same unit or none: active=14/50, 3.8GB/4GB, (1/3). A slash among more numbers
# (a date, 2026/12/07) or inside a path is no measure.
MEASURE = re.compile(r"(?<![\d./])(\d+(?:\.\d+)?)\s*([a-z]*)\s*/\s*(\d+(?:\.\d+)?)\s*([a-z]*)(?![\d/]|\.\d)",
                     re.IGNORECASE)


def asserts_limit(text: str) -> list[str]:
    """The at-limit words the text asserts: each not denied, hedged or asked in its clause before it."""
    text = statement_form(text)
    said = []
    for m in AT_LIMIT.finditer(text):
        before = text[:m.start()]
        clause = before[max((c.end() for c in CLAUSE_END.finditer(before)), default=0):]
        if not NEGATION.search(clause) and not NOT_ASSERTED.search(clause):
            said.append(m.group())
    return said


def measures(text: str) -> list[tuple[str, float, float]]:
    """Each used/limit measure of the text: (as written, used, limit)."""
    found = []
    for m in MEASURE.finditer(statement_form(text)):
        used_unit, limit_unit = m.group(2).casefold(), m.group(4).casefold()
        if used_unit and limit_unit and used_unit != limit_unit:
            continue
        if float(m.group(3)) > 0:
            found.append((m.group().strip(), float(m.group(1)), float(m.group(3))))
    return found


def below_limit(claim_text: str, lines: list[str]) -> str | None:
    """Why a claim that its resource is at its limit contradicts the `lines` it cites, or None."""
    said = asserts_limit(claim_text)
    if not said or any(AT_LIMIT.search(statement_form(line)) for line in lines):
        return None
    found = [measure for line in lines for measure in measures(line)]
    if not found or any(used >= limit for _, used, limit in found):
        return None
    return (f"the claim says {said[0]!r}, but every measure of use against a limit in the lines it cites is below "
            f"its limit ({', '.join(written for written, _, _ in found[:3])}), and none of them says so")
