"""What the devset's metric reads in an output, as deterministic parts (devset/recorded.py weighs
them): the refs its passing citations cite, the polarity of a claim, missing_info that contradicts a
claim, the narrow-scope bound; and the offline gatekeeper-reject fixture, checked without an LM. A
claim cut at the length cap is the checks' own finding (`verdict.cut_off`).
"""

from __future__ import annotations

from dataclasses import dataclass

from program.evidence.gatekeeper import check
from program.evidence.statements import CLEARED_WORDS, negated, statement_form
from program.evidence.question_words import mentions
from contracts import (
    NARROW_MAX_CLAIMS,
    NARROW_MIN_CLAIMS,
    NARROW_TYPES,
    Claim,
    ExecutorOutput,
    GatekeeperResult,
    ToolInvocation,
)
from tools.declaration import Toolbox

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


def names_ref(ref: dict, tool: str, text: str) -> bool:
    """Whether a ref of `tool` with this text is the case's `ref` (a tool name and needles, any one of which)."""
    return tool == ref["tool_name"] and any(needle in text for needle in ref["needles"])


def citation_recall(expected: list[dict], gate: GatekeeperResult,
                    invocations: list[ToolInvocation]) -> tuple[float, list[dict]]:
    """The share of the refs a good answer cites that passing bindings cite, and the refs missed."""
    cited = _cited(gate, invocations)
    found = [ref for ref in expected if any(names_ref(ref, tool, text) for tool, text in cited)]
    return (len(found) / len(expected) if expected else 1.0), [ref for ref in expected if ref not in found]


def wrong_citations(wrong: list[dict], gate: GatekeeperResult, invocations: list[ToolInvocation]) -> list[str]:
    """The texts of the refs that passing bindings cite and a good answer must not cite."""
    return [text for tool, text in _cited(gate, invocations) if any(names_ref(ref, tool, text) for ref in wrong)]


def polarity(text: str, claim_type: str | None = None) -> str:
    """Whether a claim says the asked thing is there ("present") or denies or clears it ("absent")."""
    absent = claim_type == "negative_observation" or negated(text) or CLEARED_WORDS.search(statement_form(text))
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
