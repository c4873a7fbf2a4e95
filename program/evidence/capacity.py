"""A claim that says a resource is at its limit and, in the same breath, gives the measure that shows
it is not.

"ledger-service 的连接池已耗尽：active=14/50, waiting=0。" was verified by the 1.5B verifier on the
line "HikariCP pool stats: active=14/50, idle=36, waiting=0": the claim quotes the line's own measure
of use against its limit, and says the opposite of it. Code reads only that much: a clause of the
claim that asserts exhaustion (耗尽, 已满, exhausted, at capacity, is full) and writes a named measure
`key=used/limit` below its limit, which a line it cites gives too, contradicts itself, unless a
cited line says in words that the resource ran out. Everything else about a resource's state is
the verifier's: an unnamed ratio (0/5 nodes are available, 1/3 replicas, retry 2/3: not a use
against a limit), a measure in another clause or another line, a format without a slash
("Pool stats (total=50, active=14, …)"), a word of scarcity outside this vocabulary.
"""

from __future__ import annotations

import re

from program.evidence.canonical import canonical
from program.evidence.statements import CLAUSE_END, CLEARED_WORDS, NEGATION, sentences, statement_form

# A resource at its limit. "full" only as a state ("is full", "已满"), never in "Full GC".
AT_LIMIT = re.compile(r"耗尽|用尽|用光|已满|占满|打满|满载|枯竭|"
                      r"\b(?:exhaust(?:ed|ion|s)?|depleted|saturated|maxed(?:\s+out)?|at\s+(?:full\s+)?capacity|"
                      r"at\s+(?:its|the)\s+limit|ran\s+out|(?:is|are|was|were|be)\s+full)\b", re.IGNORECASE)
# What makes an at-limit word in a sentence no assertion that the limit is reached now: nearness,
# likelihood, a question, a rejection, a state that is over.
NOT_ASSERTED = re.compile(r"接近|快要|即将|将要|几乎|趋于|可能|或将|是否|有无|排除|不成立|"
                          r"\b(?:nearly|almost|close\s+to|approaching|near|about\s+to|likely|may|might|could|"
                          r"risk|whether|if|rul(?:e|es|ed)\s+out)\b", re.IGNORECASE)
# What a line says when the resource ran out, in words, whatever its numbers say.
RAN_OUT = re.compile(AT_LIMIT.pattern + r"|exhaust|out\s*of\s*memory|outofmemory|\boom|no\s+space\s+left|"
                     r"too\s+many|not\s+available|rejected|insufficient", re.IGNORECASE)
# A named measure of use against a limit: active=14/50, used_memory=3.8GB/4GB, in_use: 9/10. A slash
# among more numbers (a date) or an unnamed ratio is none.
MEASURE = re.compile(r"\b([a-z_][\w.-]*)\s*[=:：]\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*/\s*(\d+(?:\.\d+)?)\s*([a-z]*)"
                     r"(?![\d/]|\.\d)", re.IGNORECASE)


def _clauses(text: str) -> list[tuple[str, str]]:
    """Each clause of the text with the sentence it stands in."""
    return [(clause, sentence) for sentence in sentences(text)
            for clause in CLAUSE_END.split(sentence) if clause.strip()]


def asserts_limit(clause: str, sentence: str) -> str | None:
    """The at-limit word the clause asserts: none when its sentence denies, hedges, asks or rejects
    it, or says the state is over."""
    said = AT_LIMIT.search(clause)
    if said is None or NEGATION.search(sentence) or NOT_ASSERTED.search(sentence) or CLEARED_WORDS.search(sentence):
        return None
    return said.group()


def measures(text: str) -> list[tuple[str, float, float]]:
    """Each named used/limit measure of the text: (as written, used, limit)."""
    found = []
    for m in MEASURE.finditer(statement_form(text)):
        used_unit, limit_unit = m.group(3).casefold(), m.group(5).casefold()
        if used_unit and limit_unit and used_unit != limit_unit:
            continue
        if float(m.group(4)) > 0:
            found.append((m.group().strip(), float(m.group(2)), float(m.group(4))))
    return found


def below_limit(claim_text: str, lines: list[str]) -> str | None:
    """Why a claim contradicts itself with a measure of the `lines` it cites (what was found, not
    runbooks), or None."""
    if any(RAN_OUT.search(statement_form(line)) for line in lines):
        return None
    # A measure the line gives, as the gatekeeper compares a quote with its ref.
    quoted = [canonical(line).text for line in lines]
    for clause, sentence in _clauses(statement_form(claim_text)):
        said = asserts_limit(clause, sentence)
        below = [written for written, used, limit in measures(clause)
                 if used < limit and any(canonical(written).text in line for line in quoted)]
        if said and below:
            return (f"the claim says {said!r} and gives {', '.join(below)}, a measure of use below its limit that the "
                    "line it cites shows, which says no such thing")
    return None
