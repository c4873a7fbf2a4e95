"""Is a claim about what was asked? A small model cites real evidence beside the question (a
SlowQuery alert for a HikariCP question) and the gatekeeper rightly passes it: the citation is
real. This check, in code, keeps such a claim from making a run PASS.

The question's target is read against the active catalog: the services it names and the topics
(synonym groups, alert names) it names, outside the parts the user excluded. A claim is on topic
when its text names a target service and a target topic, and every ref it cites concerns them too.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from program.scope import EXCLUSION, mentions
from tools.catalog import Catalog

# A claim that is a copied observation header ("#12 query_metrics(service=...) -> supported").
TOOL_HEADER = re.compile(r"#\d+\s+\w+\(.*\)|->\s*(?:supported|no_evidence|failed)\b|\$\.\w+\[\d+\]")


@dataclass(frozen=True)
class Target:
    services: tuple[str, ...]
    topics: tuple[tuple[str, ...], ...]

    def describe(self) -> str:
        topics = ", ".join(group[0] for group in self.topics)
        return f"services [{', '.join(self.services)}], topics [{topics}]"


def question_target(question: str, catalog: Catalog) -> Target:
    """The services and topics a question asks about, leaving out what it says not to analyse."""
    text = unicodedata.normalize("NFKC", question)
    asked = EXCLUSION.sub(" ", text)
    services = tuple(s for s in catalog.services if mentions(asked, [s.casefold()]))
    topics = tuple(group for group in catalog.topic_groups() if mentions(asked, list(group)))
    return Target(services=services, topics=topics)


def _about(text: str, target: Target) -> str | None:
    """What `text` misses of the target, or None when it names a target service and topic."""
    if target.services and not mentions(text, [s.casefold() for s in target.services]):
        return f"does not name {' or '.join(target.services)}"
    if target.topics and not any(mentions(text, list(group)) for group in target.topics):
        return f"does not concern {' or '.join(group[0] for group in target.topics)}"
    return None


def off_topic(claim_text: str, cited_texts: list[str], target: Target) -> str | None:
    """Why a claim cannot answer the question, or None when it is about the target."""
    if TOOL_HEADER.search(claim_text):
        return "the claim text is a copied tool-call header or path, not a statement"
    missing = _about(claim_text, target)
    if missing:
        return f"the claim {missing}, which the question asks about"
    for text in cited_texts:
        missing = _about(text, target)
        if missing:
            return f"cited evidence {text[:80]!r} {missing}, which the question asks about"
    return None
