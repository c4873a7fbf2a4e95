"""What code decides of a ref before the executor sees it, from the ref's own fields and the question.

A small model asked to judge each ref decides most of them "answers": all seven alerts of a lookup by
alert name, every slow line of every endpoint, the line that speaks of the topic the user excluded
(results/20261202T175809Z). What sets those refs apart is not a judgement but a field or a name, and
code reads it:
- other_service: the ref's service (the item's own field, where its tool declares one its source
  vouches for: an alert's service label) is no service the question asks about, and the call was not
  made for an asked service (a lookup by alert name alone returns every service's alert, and one of
  another service may name the asked one in its description);
- excluded: the ref speaks of what the user said not to analyse, in the terms the claim check reads
  (`Scope.exclusion`); where only some of its clauses do, only those are set aside;
- other_topic, for a narrow question: the question names alerts and the ref is another alert, and no
  topic it names either, or the question names endpoints and the ref names only others of the same
  tree (/api/v1/orders beside /api/v1/users; a file's path, /var/log/app.log, is not another endpoint);
- earlier_state: an alert that is over (its `state` field: resolved, inactive) beside one of the same
  name and service that fires or is pending, with the same labels where both carry them: what that
  alert is now is the other one.
A ref set aside whole is left out of the executor's observations (a line per call says how many and
why), of its decisions and of its menu; a clause set aside is off the menu. Each is recorded with its
reason, and a claim that cites one anyway (an LM that quotes instead of pointing) is blocked
(`verdict.set_aside`), so the screen is an assertion as well as a filter. Code cannot tell a line
that answers from one that only matched the search, nor a healthy line from an unhealthy one: those
stay the executor's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from program.evidence.matching import clauses
from program.evidence.relevance import Target
from program.evidence.scope import Exclusion, Scope
from program.evidence.statements import CLEARED_STATES, RAISED_STATES
from program.evidence.verdict import item_state, output_item
from contracts import EvidenceRef, RefDecision, SetAside, ToolInvocation
from tools.recorder import citation_label
from tools.text.folding import nfkc

# An HTTP endpoint as requests name it: a path of two or more segments that stands alone (not the
# rest of a URL's host, a file's directory or a word). ASCII only: Chinese written straight after a
# path ("/api/v1/orders接口") is no part of it.
ENDPOINT = re.compile(r"(?<![A-Za-z0-9_.~%:/-])/[A-Za-z0-9_.~%-]+(?:/[A-Za-z0-9_.~%{}<>:-]+)+")
# A path segment that stands for any value: /orders/{id}, /orders/:id, /orders/<id>.
TEMPLATE = re.compile(r"\{[^/]*\}|:[A-Za-z_]\w*|<[^/]*>")
# How the observations say why refs were set aside, by decision.
SET_ASIDE_AS = {"other_service": "of another service", "other_topic": "of another alert or endpoint",
                "excluded": "on what the user excluded", "earlier_state": "of an alert's earlier state"}


def endpoints(text: str) -> set[str]:
    """The endpoints a text names, without a query string, a trailing slash or the punctuation of
    the sentence they end."""
    return {m.group().split("?")[0].rstrip("/.,:;") for m in ENDPOINT.finditer(nfkc(text))}


def _under(named: str, asked: set[str]) -> bool:
    """Whether `named` is one of the asked paths or below one, in any case, a template segment on
    either side (/orders/{id} asked, or a route label uri=/orders/{id} in a line) matching any value."""
    segments = named.casefold().split("/")
    for path in asked:
        wanted = path.casefold().split("/")
        if len(segments) >= len(wanted) and all(w == n or TEMPLATE.fullmatch(w) or TEMPLATE.fullmatch(n)
                                                for w, n in zip(wanted, segments, strict=False)):
            return True
    return False


def _tree(path: str) -> str:
    """The first segment of a path: endpoints of one API share it (/api), and a file's path (/var)
    is no other endpoint of theirs."""
    return path.split("/")[1].casefold()


@dataclass(frozen=True)
class Screening:
    """What code set aside of one session's calls. `refs`: whole refs, by label, never shown to the
    executor; `labels`: every label that may not be cited: those refs' own and their clauses', and
    the whole label and the set-aside clauses of a ref only some of whose clauses speak of what the
    user excluded."""

    refs: dict[str, SetAside] = field(default_factory=dict)
    labels: dict[str, SetAside] = field(default_factory=dict)
    excluded: Exclusion = field(default_factory=Exclusion)

    @property
    def set_aside(self) -> list[SetAside]:
        """Each ref code decided on, once."""
        return list({aside.label: aside for aside in self.labels.values()}.values())

    def hidden(self) -> dict[str, str]:
        """The whole refs the observations leave out, each with the words that say why."""
        return {label: SET_ASIDE_AS[aside.decision] for label, aside in self.refs.items()}

    def refused(self, invocation_id: int, raw_path: str | None, context: str) -> SetAside | None:
        """Why a binding of this ref that quotes `context` cites what code set aside; None when it does not."""
        label = citation_label(invocation_id, raw_path)
        if label in self.refs:
            return self.refs[label]
        partly = self.labels.get(label)
        return partly if partly is not None and self.excluded.hits(context) else None


@dataclass(frozen=True)
class Screen:
    """What a question asks about, which a session's refs are read against: its target (services and
    the alerts it names), what the user excluded, its scope, and its own words (for the endpoints it
    names). Plain data, so that a devset example can carry it."""

    target: Target
    excluded: Exclusion = field(default_factory=Exclusion)
    narrow: bool = False
    asked: str = ""  # the question's own words, less its exclusions (Scope.asked)

    @classmethod
    def of(cls, target: Target, scope: Scope, services: Iterable[str]) -> Screen:
        """The screen of a question whose sources know `services`. Only a service the sources know is
        compared with a ref's service: a name no source knows (orders-db) is no ref's service, and the
        lines that speak of it belong to others."""
        known = {_name(name) for name in services}
        return cls(target=replace(target, services=tuple(s for s in target.services if _name(s) in known)),
                   excluded=scope.exclusion, narrow=scope.narrow, asked=scope.asked)

    def __call__(self, invocations: Iterable[ToolInvocation]) -> Screening:
        invocations = list(invocations)
        screening = Screening(excluded=self.excluded)
        asked = endpoints(self.asked) if self.narrow else set()
        for inv in invocations:
            searched = inv.input.get("service") if isinstance(inv.input.get("service"), str) else None
            for ref in inv.retrieval_details.evidence_refs:
                label = citation_label(inv.id, ref.raw_path)
                parts = [(n, clause) for n, clause in enumerate(clauses(ref.text), start=1) if clause]
                decided = self._decide(ref, searched, asked)
                terms = self.excluded.hits(ref.text)
                excluded = [n for n, clause in parts if self.excluded.hits(clause)]
                if decided is None and terms:
                    if excluded and len(excluded) < len(parts):
                        # Its other clauses still say what the ref says of the asked thing.
                        partly = SetAside(label=label, decision="excluded", reason=(
                            f"its clauses {', '.join(f'§{n}' for n in excluded)} speak of {', '.join(terms)}, "
                            "which the user excluded"))
                        screening.labels[label] = partly
                        screening.labels.update({citation_label(inv.id, ref.raw_path, n): partly for n in excluded})
                        continue
                    decided = "excluded", f"it speaks of {', '.join(terms)}, which the user excluded"
                if decided is not None:
                    _set_aside(screening, inv.id, ref, decided)
        for inv, ref, now in _earlier_states(invocations, screening):
            _set_aside(screening, inv.id, ref, ("earlier_state", (
                f"it is {item_state(inv, ref.raw_path)}, and {ref.name} on {ref.service} fires in {now}")))
        return screening

    def _decide(self, ref: EvidenceRef, searched: str | None, asked: set[str]) -> tuple[RefDecision, str] | None:
        """Why a whole ref is of another service or topic than the question asks, or None when code
        cannot tell."""
        services = {_name(s) for s in self.target.services}
        if (services and ref.service and _name(ref.service) not in services
                and not (searched and _name(searched) in services)):
            return "other_service", f"its service is {ref.service}, not {' or '.join(self.target.services)}"
        if not self.narrow:
            return None
        # An alert the question names as a topic (OOM: PodOOMKilled) is asked about too.
        alerts = {_name(a) for a in self.target.alerts} | {_name(t) for group in self.target.topics for t in group}
        if self.target.alerts and ref.name and _name(ref.name) not in alerts:
            return "other_topic", f"it is {ref.name}, not {' or '.join(self.target.alerts)}, which the question asks about"
        named = {path for path in endpoints(ref.text) if _tree(path) in {_tree(a) for a in asked}}
        if asked and named and not any(_under(path, asked) for path in endpoints(ref.text)):
            return "other_topic", (f"it names {', '.join(sorted(named))}, not {' or '.join(sorted(asked))}, which the "
                                   "question asks about")
        return None


def _set_aside(screening: Screening, invocation_id: int, ref: EvidenceRef, decided: tuple[RefDecision, str]) -> None:
    """The whole ref, and each of its clauses, off the menu."""
    label = citation_label(invocation_id, ref.raw_path)
    aside = SetAside(label=label, decision=decided[0], reason=decided[1])
    screening.refs[label] = screening.labels[label] = aside
    screening.labels.update({citation_label(invocation_id, ref.raw_path, n): aside
                             for n, clause in enumerate(clauses(ref.text), start=1) if clause})


def _earlier_states(invocations: Iterable[ToolInvocation], screening: Screening
                    ) -> list[tuple[ToolInvocation, EvidenceRef, str]]:
    """The alerts still shown that are over beside one of the same name and service that fires (or
    is pending), each with the label of the one that fires."""
    shown = [(inv, ref, item_state(inv, ref.raw_path)) for inv in invocations
             for ref in inv.retrieval_details.evidence_refs
             if ref.name and ref.service and citation_label(inv.id, ref.raw_path) not in screening.refs]
    firing = [(inv, ref) for inv, ref, state in shown if state in RAISED_STATES]
    earlier = []
    for inv, ref, state in shown:
        # Whichever lookup read it: a later one may filter by state and so show only the resolved
        # episode. The same alert: where both items carry labels (an instance, a pod), the same labels.
        now = next((citation_label(f_inv.id, f_ref.raw_path) for f_inv, f_ref in firing
                    if _same_alert(inv, ref, f_inv, f_ref)), None)
        if state in CLEARED_STATES and now is not None:
            earlier.append((inv, ref, now))
    return earlier


def _same_alert(inv: ToolInvocation, ref: EvidenceRef, other_inv: ToolInvocation, other: EvidenceRef) -> bool:
    if (_name(ref.name), _name(ref.service)) != (_name(other.name), _name(other.service)):
        return False
    labels = (output_item(inv, ref.raw_path) or {}).get("labels")
    other_labels = (output_item(other_inv, other.raw_path) or {}).get("labels")
    return not (isinstance(labels, dict) and isinstance(other_labels, dict)) or labels == other_labels


def _name(name: str) -> str:
    """A service or alert name as two spellings of it compare: NFKC, trimmed, in any case."""
    return nfkc(name).strip().casefold()
