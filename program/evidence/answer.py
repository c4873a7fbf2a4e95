"""The user-facing answer: a scan of the composer's text and a deterministic answer to fall back on.

The composer LM writes the answer; code then checks it. Raw JSON or paths, a whole tool-output
dump, a blocked claim, an excluded topic, an echoed injection, a sentence that negates a verified
claim or asserts a state its evidence does not report, a number, name or identifier that no
verified claim or cited clause contains, a clause that no verified claim grounds (an added cause, a
fix, a restated missing_info), bidirectional controls, or an answer past the length cap makes code
replace it with an answer built only from verified claims.

Every sentence of the deterministic answer is code's: the verdict, the verified claims (checked
claim by claim) with the whole clauses they cite, the searches that found nothing, the lookups
that failed. The executor's missing_info is LM text that no check reads, so it stays in the audit
record and out of this answer (the composer may read it; its answer is scanned like any other).
"""

from __future__ import annotations

import re
from dataclasses import replace

from program.evidence.characters import bidi_controls, negation_word
from program.evidence.injection import addresses_the_model, restated_instruction
from program.evidence.language import TEXT, no_hit_sentence, say, verdict_text
from program.evidence.canonical import canonical
from program.evidence.relevance import unnamed_topics
from program.evidence.question_words import mentions
from program.evidence.scope import Exclusion
from program.evidence.numbers import misbound_numbers, ungrounded_numbers
from program.evidence.statements import CLAUSE_END, NEGATION, outside_state_denials, sentences, state_conflicts
from program.evidence.names import IDENTIFIER, marked_names
from program.evidence.verdict import CitedRef
from program.evidence.wording import written_language
from contracts import RAW_PATH_IN_TEXT, Claim, Language, Verdict
from tools.text.search import read_line, read_query

RAW_JSON = re.compile(r"[{\[]\s*\"[^\"]+\"\s*:|\"(?:claim_id|evidence_bindings|source_invocation_id|raw_path)\"")
# Any locator of any tool's output: an answer is for a person, who has no use for one.
RAW_PATH = re.compile(RAW_PATH_IN_TEXT)
NO_EVIDENCE_PHRASES = ("未检索到", "未找到", "没有找到", "无真实证据", "no real evidence", "no evidence", "not found")
DUMP_CHARS = 100
MAX_POSSIBLE_MATCHES = 5
MAX_FOUND = 5
MAX_UNREAD_PLACES = 3
MAX_ANSWER_CHARS = 800
# Hedges about what is NOT confirmed are how an honest answer talks about hypotheses.
HEDGE = re.compile(r"未确认|尚未确认|无法确认|不能确认|不确定|未经证实|not (?:yet )?confirmed|cannot confirm|unconfirmed",
                   re.IGNORECASE)


# A clause of a composed answer is grounded when at least this share of its concepts (tools.text.search:
# the catalog's synonym groups and names, other words by form) occur in the verified claims and the
# clauses they cite. A paraphrase keeps most of its words; an added cause ("原因是上周的发布引入了
# 缓存泄漏", "请回滚") keeps none. Its polarity ("No, …") is not a concept: a sentence that negates a
# verified claim is caught by `contradicting_sentences`.
GROUNDED_SHARE = 0.5
PLACEHOLDER = re.compile(r"\{\w+\}")
# Code's own sentences, clause by clause: a composed answer may repeat them.
CODE_CLAUSES = frozenset(canonical(clause).text for table in TEXT.values() for sentence in table.values()
                         for piece in PLACEHOLDER.split(sentence) for clause in CLAUSE_END.split(piece)
                         if clause.strip())


def ungrounded_clauses(answer: str, verified: list[Claim], cited: dict[str, list[CitedRef]],
                       names: tuple[str, ...] = (), topics: list[tuple[str, ...]] = ()) -> list[str]:
    """The clauses of a composed answer that no verified claim grounds: fewer than GROUNDED_SHARE of
    their concepts occur in the verified claims and their evidence, and they are not code's own."""
    grounding = read_line(" ".join(f"{c.claim_text} {' '.join(contexts(c, cited))}" for c in verified))
    synonyms = {str(n): group for n, group in enumerate(topics)}
    found = []
    for clause in CLAUSE_END.split(answer):
        if not clause.strip() or canonical(clause).text in CODE_CLAUSES:
            continue
        query = read_query(clause, synonyms, names)
        query = replace(query, words=tuple(w for w in query.words if not negation_word(w)))
        groups, hits = grounding.matched(query)
        if query.concepts and groups + hits < GROUNDED_SHARE * query.concepts:
            found.append(clause.strip())
    return found


def contexts(claim: Claim, cited: dict[str, list[CitedRef]]) -> list[str]:
    """What a claim's evidence is shown as: the whole clauses its quotes sit in, never a fragment."""
    return [ref.context for ref in cited.get(claim.claim_id, [])] or [b.evidence_excerpt for b in claim.evidence_bindings]


def fact_line(claim: Claim, cited: dict[str, list[CitedRef]]) -> str:
    """How a verified claim is shown to the composer: its text and the clauses it rests on."""
    return f"{claim.claim_text} (evidence: {'; '.join(contexts(claim, cited))})"


def contradicting_sentences(answer: str, verified: list[Claim], names: tuple[str, ...],
                            cited: dict[str, list[CitedRef]]) -> list[str]:
    """Sentences that negate a verified positive claim (they name its service, alert or topic and
    carry a negation that is not a hedge about something unconfirmed), or that assert a state the
    verified claims' evidence does not report, whether or not they name the alert."""
    positives = [c for c in verified if c.claim_type != "negative_observation"]
    subjects = [n.casefold() for n in names if any(n.casefold() in c.claim_text.casefold() for c in positives)]
    states = {ref.state for c in positives for ref in cited.get(c.claim_id, []) if ref.state}
    evidence = [text for c in positives for text in contexts(c, cited)]
    found = []
    for sentence in sentences(answer):
        unhedged = HEDGE.sub(" ", sentence)
        # A denied state ("该告警没有在触发") is checked against the alert's state, not read as a negation of the claim.
        denies = outside_state_denials(NEGATION, unhedged, names)
        if (subjects and mentions(sentence, subjects) and denies) or state_conflicts(unhedged, states, evidence, names):
            found.append(sentence.strip())
    return found


def ungrounded_tokens(answer: str, verified: list[Claim], names: tuple[str, ...],
                      cited: dict[str, list[CitedRef]]) -> list[str]:
    """Numbers, identifiers, catalog names and words written as names (`marked_names`) that the
    answer states and no verified claim or cited clause holds."""
    grounding = [c.claim_text for c in verified] + [text for c in verified for text in contexts(c, cited)]
    folded = canonical(" ".join(grounding)).text
    missing = ungrounded_numbers(answer, grounding)
    tokens = IDENTIFIER.findall(answer) + [n for n in names if mentions(answer, [n.casefold()])] + marked_names(answer)
    missing += [t for t in tokens if canonical(t).text not in folded]
    return list(dict.fromkeys(missing))


def other_language(text: str, quoted: list[str], names: tuple[str, ...], language: Language | None) -> str | None:
    """Why the text is not in the answer's language: its own words, past what it quotes of the refs
    and the catalog's names, are in the other one (wording.py)."""
    if language is None or (written := written_language(text, quoted, names)) in (None, language):
        return None
    return f"the answer's own words are in {written}, not in the answer's language ({language})"


def scan_answer(
    answer: str,
    *,
    verified: list[Claim],
    blocked: list[Claim],
    excluded: Exclusion,
    ref_texts: list[str],
    names: tuple[str, ...] = (),
    cited: dict[str, list[CitedRef]] | None = None,
    topics: list[tuple[str, ...]] = (),
    language: Language | None = None,
) -> list[str]:
    """Reasons to refuse the composer's answer; empty when it may be shown. `names` are the
    catalog's service and alert names, `topics` its topic groups; `cited`, what each claim's
    passing bindings point at; `language`, the answer's. The answer is read as the claims are (statements.py)."""
    cited = cited or {}
    reasons = []
    text = answer.strip()
    if not text:
        return ["the answer is empty"]
    if reason := other_language(text, [r.text for c in verified for r in cited.get(c.claim_id, [])], names, language):
        reasons.append(reason)
    if len(text) > MAX_ANSWER_CHARS:
        reasons.append(f"the answer is {len(text)} characters, over the {MAX_ANSWER_CHARS}-character cap")
    if contradiction := contradicting_sentences(text, verified, names, cited):
        reasons.append(f"the answer negates a verified claim or its evidence: {contradiction[0]!r}")
    if ungrounded := ungrounded_tokens(text, verified, names, cited):
        reasons.append(f"the answer states {', '.join(ungrounded[:5])}, which no verified claim or excerpt contains")
    if unsupported := ungrounded_clauses(text, verified, cited, names, topics):
        reasons.append(f"the answer says {unsupported[0]!r}, which no verified claim or its evidence grounds")
    evidence = [clause for c in verified for clause in contexts(c, cited)]
    if misbound := misbound_numbers(text, evidence):
        reasons.append(f"the answer gives {misbound[0]}: a number said of another quantity")
    refs = [ref.text for c in verified for ref in cited.get(c.claim_id, [])] or evidence
    if unnamed := unnamed_topics(text, refs, topics):
        reasons.append(f"the answer speaks of {', '.join(unnamed)}, which no verified claim's evidence concerns")
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
    hits = excluded.hits(text)
    if hits:
        reasons.append(f"the answer mentions excluded topic(s): {', '.join(hits)}")
    restated = (restated_instruction(sentence, ref_texts, tuple(topics), names) for sentence in sentences(text))
    if addresses_the_model(text):
        reasons.append("the answer repeats an instruction found in tool output")
    elif reason := next(filter(None, restated), None):
        reasons.append(f"an answer sentence {reason}")
    if controls := bidi_controls(text):
        reasons.append(f"the answer holds bidirectional control characters ({', '.join(controls)})")
    has_positive = any(c.claim_type != "negative_observation" for c in verified)
    if not has_positive and not any(p in text.casefold() for p in NO_EVIDENCE_PHRASES):
        reasons.append("nothing positive was verified, but the answer does not say that no real evidence was found")
    return reasons


def deterministic_answer(verdict: Verdict, verified: list[Claim], failed_rules: list[str], *,
                         cited: dict[str, list[CitedRef]] | None = None, excluded: Exclusion = Exclusion(),
                         language: Language = "zh", possible_matches: list[str] | tuple[str, ...] = (),
                         failed_calls: list[str] | tuple[str, ...] = (),
                         unread: list[tuple[str, tuple[str, ...]]] | tuple = (),
                         found: list[str] | tuple[str, ...] = (), set_aside: int = 0) -> str:
    """The answer code can always give. A verified claim is shown with the whole clauses it cites
    (`cited`: claim id -> what its passing bindings point at). A verified negative observation is
    stated as what its searches verified ("db-01 has no HostOutOfMemory alert (the lookup found
    none)"), built from the calls' arguments, never in the LM's words, nor with the tool's own no-hit
    message, which lists the catalog (and so may name what the user excluded): a no-hit supports only
    "nothing matched". When nothing was verified, `found` are the refs the lookups returned (the ones
    the claims cited first), shown as found and not verified; "nothing was found" is said only when
    there are none and code set none aside (`set_aside`: how many refs it kept from the executor as
    not about what was asked). `failed_calls` are the lookups that failed, `unread` the searches that found
    nothing without reading every line in their scope, each with what went unread. Written in `language`."""
    cited = cited or {}
    lines = [verdict_text(language, verdict)]
    in_scope = [c for c in verified if not excluded.hits(fact_line(c, cited))]
    if len(in_scope) < len(verified):
        lines.append(say(language, "excluded_note"))
    lines += _verified_lines(in_scope, cited, excluded, language)
    # "Nothing could be verified" is said only when nothing was: a finding hidden because it names
    # an excluded topic was still verified, and saying otherwise would contradict the verdict.
    if not verified:
        lines += _unverified_lines(found, possible_matches, failed_rules, excluded, language, set_aside)
    shown = [line for line in possible_matches if not excluded.hits(line)][:MAX_POSSIBLE_MATCHES]
    if shown:
        lines.append(say(language, "possible_matches"))
        lines.extend(f"- {line}" for line in shown)
    calls = [call for call in failed_calls if not excluded.hits(call)]
    if calls:
        lines.append(say(language, "failed_calls"))
        lines.extend(f"- {call}" for call in calls)
    incomplete = [(search, places) for search, places in unread if not excluded.hits(search)]
    if incomplete:
        lines.append(say(language, "unread"))
        lines.extend(say(language, "unread_line", search=search, places=shown_places(places))
                     for search, places in incomplete)
    return "\n".join(lines)


def _verified_lines(verified: list[Claim], cited: dict[str, list[CitedRef]], excluded: Exclusion,
                    language: Language) -> list[str]:
    """The verified claims with the clauses they cite, then what each verified negative's searches verified."""
    lines = []
    for claim in verified:
        if claim.claim_type != "negative_observation":
            excerpts = say(language, "excerpt_join").join(contexts(claim, cited)[:3])
            lines.append(say(language, "verified_line", claim=claim.claim_text, excerpts=excerpts))
    for claim in verified:
        if claim.claim_type == "negative_observation":
            lines += [line for ref in cited.get(claim.claim_id, []) if ref.no_hit
                      if not excluded.hits(line := _negative_line(ref, language))]
    return [say(language, "verified"), *lines] if lines else []


def _negative_line(ref: CitedRef, language: Language) -> str:
    sentence = no_hit_sentence(language, ref.items, ref.arguments)
    return say(language, "negative_line", sentence=sentence) if sentence else say(language, "no_hit_line",
                                                                                   search=ref.searched)


def _unverified_lines(found, possible_matches, failed_rules: list[str], excluded: Exclusion,
                      language: Language, set_aside: int = 0) -> list[str]:
    """What an answer that verified nothing says of the evidence: what the lookups found, not verified,
    or that they found nothing; and which rules failed."""
    shown = [line for line in dict.fromkeys(found) if line not in possible_matches
             and not excluded.hits(line)][:MAX_FOUND]
    if shown:
        lines = [say(language, "found_unverified"), *(f"- {line}" for line in shown)]
    else:
        # The question itself is not repeated: it may name topics the user excluded.
        lines = [say(language, "found_none_shown" if found or possible_matches else
                     "found_set_aside" if set_aside else "nothing")]
    if failed_rules:
        lines.append(say(language, "reason", rules=", ".join(failed_rules)))
    return lines


def shown_places(places: tuple[str, ...]) -> str:
    shown = ", ".join(places[:MAX_UNREAD_PLACES])
    return shown + (f" (+{len(places) - MAX_UNREAD_PLACES})" if len(places) > MAX_UNREAD_PLACES else "")
