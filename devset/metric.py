"""The devset metric for whole diagnoses, built from deterministic parts only.

score = 0.30 verdict match + 0.20 gatekeeper pass + 0.15 no forbidden term in claims or answer
      + 0.10 narrow-scope bound + 0.15 citation recall + 0.10 required facts,
where the forbidden-term and scope parts count only for a run with a claim whose citations all
passed: output that says nothing earns nothing for saying nothing wrong,
with feedback naming every failed part and why (for a failed gatekeeper, its rules and messages).
It scores whole diagnoses: optimize.py's final comparison on the held-out split (`--pipeline`).
The optimizer's own metric is the executor-level one in devset/recorded.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from program.evidence.gatekeeper import check
from program.evidence.statements import CLEARED_WORDS, fold, negated
from program.lm.adapter import TEXT_MAX_CHARS
from program.evidence.scope import mentions, read_scope
from signatures.contracts import (
    NARROW_MAX_CLAIMS,
    NARROW_MIN_CLAIMS,
    NARROW_TYPES,
    Claim,
    DiagnosisResult,
    ExecutorOutput,
    GatekeeperResult,
    ToolInvocation,
)
from tools.catalog import active_catalog
from tools.declaration import Toolbox

WEIGHTS = {"verdict": 0.30, "gatekeeper": 0.20, "forbidden": 0.15, "scope": 0.10, "recall": 0.15, "facts": 0.10}


@dataclass
class Breakdown:
    parts: dict[str, float] = field(default_factory=dict)
    feedback: list[str] = field(default_factory=list)
    forbidden_hits: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(sum(WEIGHTS[k] * v for k, v in self.parts.items()), 4)


def _ref_text(invocations: dict[int, ToolInvocation], inv_id: int | None, raw_path: str | None) -> str | None:
    inv = invocations.get(inv_id) if inv_id is not None else None
    if inv is None:
        return None
    if raw_path is None:
        return inv.retrieval_details.message
    return next((r.text for r in inv.retrieval_details.evidence_refs if r.raw_path == raw_path), None)


def narrow_problems(claims: list[Claim]) -> list[str]:
    """What breaks the narrow-scope bound: one or two claims, observations only."""
    problems = []
    if not NARROW_MIN_CLAIMS <= len(claims) <= NARROW_MAX_CLAIMS:
        problems.append(f"{len(claims)} claims for a narrow question (want {NARROW_MIN_CLAIMS} to {NARROW_MAX_CLAIMS})")
    wrong = sorted({c.claim_type for c in claims} - set(NARROW_TYPES))
    if wrong:
        problems.append(f"narrow question answered with claim types {', '.join(wrong)}")
    return problems


def _cited(gate: GatekeeperResult, invocations: list[ToolInvocation]) -> list[tuple[str, str]]:
    """(tool, ref text) of every passing binding."""
    by_id = {inv.id: inv for inv in invocations}
    cited = [(cb.tool_name, _ref_text(by_id, cb.source_invocation_id, cb.raw_path))
             for cb in gate.checked_bindings if cb.status == "pass"]
    return [(tool, text) for tool, text in cited if text]


def _names(ref: dict, tool: str, text: str) -> bool:
    return tool == ref["tool_name"] and any(needle in text for needle in ref["needles"])


def citation_recall(expected: list[dict], gate: GatekeeperResult,
                    invocations: list[ToolInvocation]) -> tuple[float, list[dict]]:
    """The share of the refs a good answer cites that passing bindings cite, and the refs missed."""
    cited = _cited(gate, invocations)
    found = [ref for ref in expected if any(_names(ref, tool, text) for tool, text in cited)]
    return (len(found) / len(expected) if expected else 1.0), [ref for ref in expected if ref not in found]


def wrong_citations(wrong: list[dict], gate: GatekeeperResult, invocations: list[ToolInvocation]) -> list[str]:
    """The texts of the refs that passing bindings cite and a good answer must not cite."""
    return [text for tool, text in _cited(gate, invocations) if any(_names(ref, tool, text) for ref in wrong)]


def polarity(text: str, claim_type: str | None = None) -> str:
    """Whether a claim says the asked thing is there ("present") or denies or clears it ("absent")."""
    absent = claim_type == "negative_observation" or negated(text) or CLEARED_WORDS.search(fold(text))
    return "absent" if absent else "present"


def contradicted(missing_info: list[str], claims: list[Claim], names: tuple[str, ...]) -> list[str]:
    """missing_info entries that say the opposite of a claim about the same named thing (a service or
    an alert: "未找到 order-service 的 HighMemoryUsage 告警" beside a claim that it fires): the answer
    would print both. An entry about something the claim does not name ("no heap dump") is no
    contradiction."""
    folded = [n.casefold() for n in names]
    found = []
    for item in missing_info:
        for claim in claims:
            shared = set(mentions(item, folded)) & set(mentions(claim.claim_text, folded))
            if shared and polarity(item) != polarity(claim.claim_text, claim.claim_type):
                found.append(item)
                break
    return found


def cut_short(claims: list[Claim]) -> list[str]:
    """Claims whose text reached the length the response schema allows: the LM was cut off mid-claim."""
    return [c.claim_id for c in claims if len(c.claim_text) >= TEXT_MAX_CHARS]


def score_run(case: dict, result: DiagnosisResult, invocations: list[ToolInvocation]) -> Breakdown:
    out = Breakdown()
    gate: GatekeeperResult = result.gatekeeper_result
    claims = [c.claim for c in result.claims]

    out.parts["verdict"] = float(result.verdict == case["expected_verdict"])
    if not out.parts["verdict"]:
        out.feedback.append(f"verdict {result.verdict}, expected {case['expected_verdict']}")

    expected_gate = "fail" if case["expected_verdict"] == "REJECT" else "pass"
    out.parts["gatekeeper"] = float(gate.status == expected_gate)
    if gate.status == "fail" and expected_gate == "pass":
        details = "; ".join(f"{e.rule}: {e.message}" for e in gate.errors[:4])
        out.feedback.append(f"gatekeeper {gate.severity}: {details}")

    terms = [t.casefold() for t in case["forbidden_terms"]]
    text = " ".join(c.claim_text for c in claims) + " " + result.answer
    out.forbidden_hits = mentions(text, terms)
    out.parts["forbidden"] = float(not out.forbidden_hits)
    if out.forbidden_hits:
        out.feedback.append(f"forbidden terms in claims or answer: {', '.join(out.forbidden_hits)}")

    problems = narrow_problems(claims) if read_scope(case["question"], active_catalog()).narrow else []
    out.feedback.extend(problems)
    out.parts["scope"] = float(not problems)

    passed = {cb.claim_id for cb in gate.checked_bindings if cb.status == "pass"}
    failed = {cb.claim_id for cb in gate.checked_bindings if cb.status != "pass"}
    if not (passed - failed) and case["expected_verdict"] != "REJECT":
        out.parts["forbidden"] = out.parts["scope"] = 0.0
        out.feedback.append("no claim has all its citations passed, so scope and forbidden-term checks earn nothing")

    out.parts["recall"], missed = citation_recall(case["expected_refs"] or [], gate, invocations)
    out.feedback.extend(f"no passing citation of the {r['tool_name']} ref containing {' or '.join(map(repr, r['needles']))}" for r in missed)

    verified_text = " ".join(c.claim.claim_text for c in result.claims if c.verification_status == "verified")
    facts = case["required_facts"] or []
    missing = [f for f in facts if f.casefold() not in verified_text.casefold()]
    out.parts["facts"] = 1 - len(missing) / len(facts) if facts else 1.0
    if missing:
        out.feedback.append(f"verified claims lack: {', '.join(missing)}")
    return out


@dataclass
class FixtureCheck:
    """What the gatekeeper made of the offline reject fixture: nothing here is scored that was not checked."""

    severity: str
    failed_rules: list[str]
    expected_rules: list[str]

    @property
    def ok(self) -> bool:
        return self.severity == "reject" and set(self.expected_rules) <= set(self.failed_rules)


def check_fixture(case: dict, executor_output: dict, invocations: list[ToolInvocation], session_id: str,
                  toolbox: Toolbox) -> FixtureCheck:
    """The offline gatekeeper-reject case: the gatekeeper alone must reject the fixture with its rules."""
    gate = check(ExecutorOutput.model_validate(executor_output), invocations, session_id, toolbox=toolbox)
    return FixtureCheck(severity=gate.severity, failed_rules=list(gate.failed_rules),
                        expected_rules=list(case["fixture_executor_output"].get("expected_failed_rules") or []))
