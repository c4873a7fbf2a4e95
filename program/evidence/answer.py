"""The user-facing answer: a scan of the composer's text and a deterministic answer to fall back on.

The composer LM writes the answer; code then checks it. Raw JSON or paths, a whole tool-output
dump, a blocked claim, an excluded topic, an echoed injection, a sentence that negates a verified
claim, a number, name or identifier that no verified claim or excerpt contains, or an answer past
the length cap makes code replace it with an answer built only from verified claims.
"""

from __future__ import annotations

import re

from program.evidence.injection import addresses_the_model, restated_instruction
from program.evidence.language import say, verdict_text
from program.evidence.matching import canonical
from program.evidence.scope import mentions
from program.evidence.verdict import IDENTIFIER, NUMBER, negated
from signatures.contracts import Claim, Language, MissingInfo, Verdict

RAW_JSON = re.compile(r"[{\[]\s*\"[^\"]+\"\s*:|\"(?:claim_id|evidence_bindings|source_invocation_id|raw_path)\"")
# Any locator of any tool's output: an answer is for a person, who has no use for one.
RAW_PATH = re.compile(r"\$\.[A-Za-z_]+\[\d+\]")
NO_EVIDENCE_PHRASES = ("未检索到", "未找到", "没有找到", "无真实证据", "no real evidence", "no evidence", "not found")
DUMP_CHARS = 100
MAX_POSSIBLE_MATCHES = 5
MAX_ANSWER_CHARS = 800
SENTENCE = re.compile(r"[^。！？!?;；\n]+(?:[。！？!?;；\n]|$)")
# Hedges about what is NOT confirmed are how an honest answer talks about hypotheses.
HEDGE = re.compile(r"未确认|尚未确认|无法确认|不能确认|不确定|未经证实|not (?:yet )?confirmed|cannot confirm|unconfirmed",
                   re.IGNORECASE)


def fact_line(claim: Claim) -> str:
    """How a verified claim is shown to the composer: its text and the excerpts it rests on."""
    return f"{claim.claim_text} (evidence: {'; '.join(b.evidence_excerpt for b in claim.evidence_bindings)})"


def _grounding_text(claims: list[Claim]) -> str:
    return " ".join([c.claim_text for c in claims] + [b.evidence_excerpt for c in claims for b in c.evidence_bindings])


def contradicting_sentences(answer: str, verified: list[Claim], names: tuple[str, ...]) -> list[str]:
    """Sentences that negate a verified positive claim: they name its service, alert or topic and
    carry a negation that is not a hedge about something unconfirmed."""
    positives = [c for c in verified if c.claim_type != "negative_observation"]
    subjects = [n.casefold() for n in names if any(n.casefold() in c.claim_text.casefold() for c in positives)]
    found = []
    for sentence in SENTENCE.findall(answer):
        if subjects and mentions(sentence, subjects) and negated(HEDGE.sub(" ", sentence)):
            found.append(sentence.strip())
    return found


def ungrounded_tokens(answer: str, verified: list[Claim], names: tuple[str, ...]) -> list[str]:
    """Numbers, identifiers and catalog names the answer states that no verified claim or excerpt holds."""
    grounding = _grounding_text(verified)
    folded = canonical(grounding).text
    values = {float(n) for n in NUMBER.findall(canonical(grounding).text)}
    missing = [n for n in NUMBER.findall(canonical(answer).text) if float(n) not in values]
    tokens = IDENTIFIER.findall(answer) + [n for n in names if mentions(answer, [n.casefold()])]
    missing += [t for t in tokens if canonical(t).text not in folded]
    return list(dict.fromkeys(missing))


def scan_answer(
    answer: str,
    *,
    verified: list[Claim],
    blocked: list[Claim],
    excluded_terms: tuple[str, ...],
    ref_texts: list[str],
    names: tuple[str, ...] = (),
) -> list[str]:
    """Reasons to refuse the composer's answer; empty when it may be shown. `names` are the
    catalog's service and alert names."""
    reasons = []
    text = answer.strip()
    if not text:
        return ["the answer is empty"]
    if len(text) > MAX_ANSWER_CHARS:
        reasons.append(f"the answer is {len(text)} characters, over the {MAX_ANSWER_CHARS}-character cap")
    if contradiction := contradicting_sentences(text, verified, names):
        reasons.append(f"the answer negates a verified claim: {contradiction[0]!r}")
    if ungrounded := ungrounded_tokens(text, verified, names):
        reasons.append(f"the answer states {', '.join(ungrounded[:5])}, which no verified claim or excerpt contains")
    if RAW_JSON.search(text) or RAW_PATH.search(text):
        reasons.append("the answer contains raw JSON or evidence paths")
    folded = canonical(text).text
    if any(len(ref) >= DUMP_CHARS and canonical(ref).text in folded for ref in ref_texts):
        reasons.append("the answer pastes raw tool output")
    verified_texts = {canonical(c.claim_text).text for c in verified}
    for claim in blocked:
        claim_text = canonical(claim.claim_text).text
        if claim_text and claim_text not in verified_texts and claim_text in folded:
            reasons.append(f"the answer states blocked claim {claim.claim_id}")
    hits = mentions(text, excluded_terms)
    if hits:
        reasons.append(f"the answer mentions excluded topic(s): {', '.join(hits)}")
    restated = (restated_instruction(sentence, ref_texts, names=names) for sentence in SENTENCE.findall(text))
    if addresses_the_model(text):
        reasons.append("the answer repeats an instruction found in tool output")
    elif reason := next(filter(None, restated), None):
        reasons.append(f"an answer sentence {reason}")
    has_positive = any(c.claim_type != "negative_observation" for c in verified)
    if not has_positive and not any(p in text.casefold() for p in NO_EVIDENCE_PHRASES):
        reasons.append("nothing positive was verified, but the answer does not say that no real evidence was found")
    return reasons


def deterministic_answer(verdict: Verdict, verified: list[Claim], missing: list[MissingInfo],
                         failed_rules: list[str], excluded_terms: tuple[str, ...] = (),
                         no_hits: dict[str, list[str]] | None = None, language: Language = "zh",
                         possible_matches: list[str] | tuple[str, ...] = ()) -> str:
    """The answer code can always give. A verified negative observation is stated as the searches
    that found nothing (`no_hits`: claim id -> the calls that were made), never in the LM's words,
    nor with the tool's own no-hit message, which lists the catalog (and so may name what the user
    excluded): a no-hit supports only "nothing matched". Written in `language`."""
    no_hits = no_hits or {}
    lines = [verdict_text(language, verdict)]
    in_scope = [c for c in verified if not mentions(fact_line(c), excluded_terms)]
    if len(in_scope) < len(verified):
        lines.append(say(language, "excluded_note"))
    # "Nothing could be verified" is said only when nothing was: a finding hidden because it names
    # an excluded topic was still verified, and saying otherwise would contradict the verdict.
    anything_verified = bool(verified)
    verified = in_scope
    missing = [m for m in missing if not mentions(m.description, excluded_terms)]
    positives = [c for c in verified if c.claim_type != "negative_observation"]
    negatives = [c for c in verified if c.claim_type == "negative_observation"]
    if positives:
        lines.append(say(language, "verified"))
        for claim in positives:
            excerpts = say(language, "excerpt_join").join(b.evidence_excerpt for b in claim.evidence_bindings[:3])
            lines.append(say(language, "verified_line", claim=claim.claim_text, excerpts=excerpts))
    for claim in negatives:
        searches = no_hits.get(claim.claim_id) or [claim.claim_text]
        lines.extend(say(language, "no_hit_line", search=search) for search in searches
                     if not mentions(search, excluded_terms))
    if not anything_verified:
        # The question itself is not repeated: it may name topics the user excluded.
        lines.append(say(language, "nothing"))
        if failed_rules:
            lines.append(say(language, "reason", rules=", ".join(failed_rules)))
    shown = [line for line in possible_matches if not mentions(line, excluded_terms)][:MAX_POSSIBLE_MATCHES]
    if shown:
        lines.append(say(language, "possible_matches"))
        lines.extend(f"- {line}" for line in shown)
    if missing:
        lines.append(say(language, "missing"))
        lines.extend(f"- {m.description}" for m in missing)
    return "\n".join(lines)
