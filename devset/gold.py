"""Gold outputs for a devset case, per stage, resolved against the evidence a run actually has.

Invocation ids differ per session, so a gold citation is stored as a tool name plus a needle of ref
text; `gold_executor_output` finds the matching ref in the observations the executor was shown,
and cites it by its label (`point=True`, the form the executor writes) or by a quoted binding.
Used for labeled demos and by tests that script a good LM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from devset.metric import names_ref
from program.evidence.matching import CLAUSE, clauses
from tools.recorder import citation_label, observed_refs


@dataclass(frozen=True)
class Ref:
    invocation_id: int
    tool_name: str
    raw_path: str | None  # None for the no-hit message of a search that found nothing
    text: str

    @property
    def label(self) -> str:
        return citation_label(self.invocation_id, self.raw_path)

    def labels_for(self, excerpt: str | None) -> list[str]:
        """The labels that cite `excerpt` of this ref: the clauses it is made of, or the whole ref."""
        if not excerpt or excerpt == self.text:
            return [self.label]
        parts = [(n, clause) for n, clause in enumerate(clauses(self.text), start=1) if clause]
        chosen = [n for n, clause in parts if clause in CLAUSE.split(excerpt)]
        if not chosen or len(chosen) == len(parts):
            return [self.label]
        return [citation_label(self.invocation_id, self.raw_path, n) for n in chosen]


def refs_in(observations: str) -> list[Ref]:
    """Every citable ref and no-hit message in the observations text (tools.recorder's rendering)."""
    return [Ref(*ref) for ref in observed_refs(observations)]


class GoldUnavailable(LookupError):
    """The observations lack a ref the gold output needs (the run gathered other evidence)."""


def find_ref(observations: str, needle: str, tool_name: str | None = None) -> Ref:
    for ref in refs_in(observations):
        if needle in ref.text and (tool_name is None or ref.tool_name == tool_name):
            return ref
    raise GoldUnavailable(f"no {tool_name or ''} ref containing {needle!r} in the observations")


def gold_plan(case: dict) -> dict:
    """The planner's gold output: what it writes (targets and exclusions; code reads the scope). A
    variant stores only its targets, and its exclusions are those the question's clauses mark."""
    plan = case["gold"]["plan"]
    excluded = plan.get("excluded_topics")
    if excluded is None:
        from program.evidence.scope import read_scope
        from tools.catalog import active_catalog

        excluded = list(read_scope(case["question"], active_catalog()).excluded_topics)
    return {"target_services": plan["target_services"], "topics": plan["topics"], "excluded_topics": excluded}


def gold_tool_calls(case: dict) -> list[dict]:
    return [{k: v for k, v in call.items() if v is not None} for call in case["gold"]["tool_calls"]]


def gold_executor_output(case: dict, observations: str, *, point: bool = False, translated: bool = False) -> dict:
    """The case's gold claims on these observations; `point`: bindings are labels; `translated`: the
    claim texts and missing_info in the case's other language (its `translation`), the bindings the same."""
    texts = case["translation"]["claims"] if translated else [c["claim_text"] for c in case["gold"]["claims"]]
    missing_texts = case["translation"]["missing_info"] if translated else case["gold"]["missing_info"] or []
    if len(texts) != len(case["gold"]["claims"]):
        raise ValueError(f"{case['case_id']}: its translation has {len(texts)} claims, its gold {len(case['gold']['claims'])}")
    claims = []
    for n, (spec, text) in enumerate(zip(case["gold"]["claims"], texts, strict=True), start=1):
        bindings = []
        for b in spec["bindings"]:
            ref = find_ref(observations, b["needle"], b["tool_name"])
            if point:
                bindings += [label for label in ref.labels_for(b.get("excerpt")) if label not in bindings]
            else:
                bindings.append({"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id,
                                 "raw_path": ref.raw_path, "evidence_excerpt": b.get("excerpt") or ref.text})
        claims.append({"claim_id": f"claim-{n}", "claim_type": spec["claim_type"], "claim_text": text,
                       "evidence_bindings": bindings})
    missing = [{"info_id": f"missing-{n}", "description": text} for n, text in enumerate(missing_texts, start=1)]
    return {"claims": claims, "hypotheses": [], "missing_info": missing, "recommended_actions": []}


# What a ref a good answer must not cite is to the question, by the kind of case it is in.
WRONG_DECISION = {"state_pair": "earlier_state", "other_service": "other_service", "excluded_same_log": "excluded",
                  "some_lines": "other_topic", "mixed": "earlier_state", "broad": "earlier_state"}
SERVICE_FIELD = re.compile(r"\bservice=([\w.-]+)")


def gold_decisions(case: dict, observations: str) -> list[dict]:
    """The case's decision on every ref it is shown, by label: a ref a good answer cites answers; a
    ref it must not cite is what the case's kind makes it (an earlier state, another service's
    alert, an excluded topic, another endpoint); another service's ref is other_service; the rest
    are irrelevant."""
    def named(ref: Ref, refs: list[dict]) -> bool:
        return any(names_ref(r, ref.tool_name, ref.text) for r in refs)

    cited = {label for claim in gold_executor_output(case, observations, point=True)["claims"]
             for label in claim["evidence_bindings"]}
    targets = set(case["gold"]["plan"]["target_services"])
    decided = {}
    for ref in refs_in(observations):
        service = SERVICE_FIELD.search(ref.text)
        if ref.label in cited or any(label.startswith(f"{ref.label} §") for label in cited) or named(ref, case["expected_refs"]):
            decided[ref.label] = "answers"
        elif named(ref, case["wrong_refs"]):
            decided[ref.label] = WRONG_DECISION.get(case["kind"], "irrelevant")
        elif service and service.group(1) not in targets:
            decided[ref.label] = "other_service"
        else:
            decided[ref.label] = "irrelevant"
    return [{"ref": label, "decision": decision} for label, decision in decided.items()]


def fixture_executor_output(case: dict, invocation_ids: list[int]) -> dict:
    """The offline fixture's executor output with call indexes replaced by this run's invocation ids."""
    fixture = case["fixture_executor_output"]
    claims = []
    for claim in fixture["claims"]:
        bindings = [
            {"tool_name": b["tool_name"], "source_invocation_id": invocation_ids[b["call_index"]],
             "raw_path": b["raw_path"], "evidence_excerpt": b["evidence_excerpt"]}
            for b in claim["evidence_bindings"]
        ]
        claims.append({**{k: claim[k] for k in ("claim_id", "claim_type", "claim_text")}, "evidence_bindings": bindings})
    return {"claims": claims, "hypotheses": [], "missing_info": [], "recommended_actions": []}
