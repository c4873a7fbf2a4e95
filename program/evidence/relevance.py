"""Is a claim about what was asked? A small model cites real evidence beside the question (a
SlowQuery alert for a HikariCP question) and the gatekeeper rightly passes it: the citation is
real. This check, in code, keeps such a claim from making a run PASS.

The question's target is read against the active catalog: the services it names and the topics
(synonym groups, alert names) it names, outside the parts the user excluded. A claim is on topic
when its text names a target service and a target topic, and every ref it cites concerns them too.
A value the question quotes (an alert's label) is one name, matched whole (program.evidence.scope);
one that names nothing the sources know is still what was asked about, so a claim must cite
evidence that holds it whole: `order-service\\` is not order-service.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from program.evidence.question_words import mentions, question_names, without_exclusions
from program.evidence.scope import Exclusion
from contracts import ToolInvocation
from tools.catalog import Catalog
from tools.text.folding import fold, fold_label, nfkc
from tools.recorder import COPIED_OBSERVATION, call_text, citation_label


@dataclass(frozen=True)
class Target:
    services: tuple[str, ...]
    topics: tuple[tuple[str, ...], ...]
    alerts: tuple[str, ...] = ()  # catalog alert names the question spells out
    unknown: tuple[str, ...] = ()  # quoted values that name nothing the sources know

    def without(self, excluded: Exclusion) -> Target:
        """The target less what the user excluded. An exclusion that would leave none of the
        services, topics or alerts the question named takes nothing of that kind away: with an
        empty target the relevance checks would pass a claim about anything, while the exclusion
        check still blocks every claim that names what was excluded, so such a question fails
        closed."""
        services = tuple(s for s in self.services if not excluded.hits(s))
        topics = tuple(g for g in self.topics if not any(excluded.hits(t) for t in g))
        alerts = tuple(a for a in self.alerts if not excluded.hits(a))
        return Target(services=services or self.services, topics=topics or self.topics, alerts=alerts or self.alerts,
                      unknown=self.unknown)

    def describe(self) -> str:
        topics = ", ".join(group[0] for group in self.topics)
        return f"services [{', '.join(self.services)}], topics [{topics}]"


def _named_topics(text: str, groups: list[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    """The groups the text names, where a term counts only outside a longer term of another group:
    "OutOfMemoryError" names out-of-memory, not "memory"."""
    folded = fold(text)
    spans = [(m.start(), m.end(), n) for n, group in enumerate(groups) for term in group if term
             for m in re.finditer(re.escape(term), folded) if mentions(folded[max(0, m.start() - 1):m.end() + 1], [term])]
    kept = {n for start, end, n in spans
            if not any(s <= start and end <= e and (e - s) > (end - start) and other != n for s, e, other in spans)}
    return tuple(group for n, group in enumerate(groups) if n in kept)


# A name as services are written: letters and digits joined by hyphens or underscores (orders-db,
# db-01, redis_cache), standing alone, not inside a path, a URL or an address.
NAME_LIKE = re.compile(r"(?<![\w./:@-])[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+(?![\w/:@-]|\.\w)")


def unknown_names(question: str, catalog: Catalog) -> tuple[str, ...]:
    """The names the question spells as services are written that no source knows (orders-db when
    the sources know only order-service): the tool-call grammar offers them beside the known names,
    so that it never makes the planner swap one name for another."""
    known = {name.casefold() for name in (*catalog.services, *catalog.alert_names)}
    named = question_names(question, catalog)
    spelled = [n for n in NAME_LIKE.findall(named.own) if n.casefold() not in known]
    # A quoted value that names nothing the sources know is asked about as it is written, whole.
    return tuple(dict.fromkeys([*spelled, *named.unknown]))


def question_target(question: str, catalog: Catalog) -> Target:
    """The services, topics and alerts a question asks about, leaving out what it says not to analyse.
    A question that names no service a source knows asks about the names it spells as services, so a
    claim about a known service with a similar name is not about what was asked."""
    named = question_names(question, catalog)
    groups = catalog.topic_groups()
    quoted = tuple(g for g in groups if set(g) & set(named.quoted_terms))
    topics = tuple(dict.fromkeys(_named_topics(named.own, groups) + quoted))
    services = named.services or tuple(n for n in unknown_names(question, catalog) if n not in named.unknown)
    return Target(services=services, topics=topics, alerts=named.alerts, unknown=named.unknown)


def _about(text: str, target: Target) -> str | None:
    """What `text` misses of the target, or None when it names a target service and topic."""
    if target.services and not mentions(text, [s.casefold() for s in target.services]):
        return f"does not name {' or '.join(target.services)}"
    if target.topics and not any(mentions(text, list(group)) for group in target.topics):
        return f"does not concern {' or '.join(group[0] for group in target.topics)}"
    return None


def off_topic(claim_text: str, cited_texts: list[str], target: Target) -> str | None:
    """Why a claim cannot answer the question, or None when it is about the target."""
    if COPIED_OBSERVATION.search(claim_text):
        return "the claim text is a copied tool-call header or path, not a statement"
    missing = _about(claim_text, target)
    if missing:
        return f"the claim {missing}, which the question asks about"
    for value in target.unknown:
        if not any(fold_label(value) in fold_label(text) for text in cited_texts):
            return (f"the question quotes {value!r}, which is no service, alert or topic the sources know, and no "
                    "cited evidence holds it whole")
    # Every citation must be about the target service; one that also concerns the asked topic is
    # enough for the topic, so a weaker citation beside it does not sink a claim its strongest proves.
    services = [s.casefold() for s in target.services]
    for text in cited_texts:
        if services and not mentions(text, services):
            return f"cited evidence {text[:80]!r} does not name {' or '.join(target.services)}, which the question asks about"
    if cited_texts and all(_about(text, target) for text in cited_texts):
        return (f"no cited evidence concerns {' or '.join(group[0] for group in target.topics)}, which the question "
                f"asks about (first: {cited_texts[0][:80]!r})")
    return None


@dataclass(frozen=True)
class Unanswered:
    """A thing the question asks about that a search looked for and found nothing, and that no claim
    speaks of: the answer leaves it unsaid although "nothing found" is there to cite."""

    asked: str
    label: str  # the no-hit's
    call: str


def unanswered(spoken: list[str], invocations: list[ToolInvocation], target: Target,
               set_aside: frozenset[str] = frozenset()) -> list[Unanswered]:
    """The asked topics and alerts of `target` that a search whose arguments name them found nothing
    of (its no-hit not among the `set_aside` labels, and not a search that left lines unread, which
    proves no absence), while nothing `spoken` (the claims' texts and what they cite) names them; the
    first such search of each. A question that asks two things got one answer in both English
    `mixed` cases of per_kind in results/20261207T120521Z: the alert, and not the log search that
    found nothing."""
    said = " ".join(spoken)
    # An alert name is also a term of its topic's group: one asked thing, called by the alert's name.
    asked = [(next((a for a in target.alerts if fold(a) in group), group[0]), list(group)) for group in target.topics]
    asked += [(alert, [fold(alert)]) for alert in target.alerts if not any(fold(alert) in g for g in target.topics)]
    found: dict[str, Unanswered] = {}
    for invocation in invocations:
        details = invocation.retrieval_details
        label = citation_label(invocation.id, None)
        if details.evidence_status != "no_evidence" or details.unread or label in set_aside:
            continue
        searched = " ".join(v for k, v in invocation.input.items() if isinstance(v, str) and k != "service")
        for name, terms in asked:
            if name not in found and mentions(searched, terms) and not mentions(said, terms):
                found[name] = Unanswered(asked=name, label=label, call=call_text(invocation))
    return list(found.values())


def unnamed_topics(claim_text: str, cited_texts: list[str], groups: list[tuple[str, ...]]) -> list[str]:
    """Topics the claim names that none of its cited refs concerns: an add-on such as "…且连接池已
    耗尽导致内存上涨" on a memory alert speaks of what its evidence never mentions."""
    # The refs are read generously (a term inside a longer one counts: OutOfMemoryError concerns
    # memory), the claim strictly: what the claim names must be somewhere in what it cites.
    cited = fold(" ".join(cited_texts))
    return [group[0] for group in _named_topics(claim_text, groups) if not any(term and term in cited for term in group)]


def question_words(question: str, catalog: Catalog) -> str:
    """The question's own words, for a search made independently of the LM's wording: without the
    clauses that exclude topics and without service names (the search is filtered by service)."""
    text = without_exclusions(nfkc(question), catalog)
    for service in sorted(catalog.services, key=len, reverse=True):
        text = re.sub(re.escape(service), " ", text, flags=re.IGNORECASE)
    return " ".join(text.split())
