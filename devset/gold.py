"""Gold outputs for a devset case, per stage, resolved against the evidence a run actually has.

Invocation ids differ per session, so a gold citation is stored as a tool name plus a needle of ref
text; `gold_executor_output` finds the matching ref in the observations the executor was shown.
Used for labeled demos and by tests that script a good LM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OBSERVATION_HEAD = re.compile(r"^#(\d+) (\w+)\((.*)\) -> (\w+)", re.MULTILINE)


@dataclass(frozen=True)
class Ref:
    invocation_id: int
    tool_name: str
    raw_path: str | None  # None for the no-hit message of a search that found nothing
    text: str


def refs_in(observations: str) -> list[Ref]:
    """Every citable ref and no-hit message in the observations text (tools.recorder's rendering)."""
    refs: list[Ref] = []
    current = None
    for line in observations.splitlines():
        head = OBSERVATION_HEAD.match(line)
        if head:
            current = (int(head.group(1)), head.group(2))
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("no-hit message: "):
            refs.append(Ref(current[0], current[1], None, stripped[len("no-hit message: "):]))
        elif stripped.startswith("$."):
            path, _, text = stripped.partition(": ")
            refs.append(Ref(current[0], current[1], path, text))
    return refs


class GoldUnavailable(LookupError):
    """The observations lack a ref the gold output needs (the run gathered other evidence)."""


def find_ref(observations: str, needle: str, tool_name: str | None = None) -> Ref:
    for ref in refs_in(observations):
        if needle in ref.text and (tool_name is None or ref.tool_name == tool_name):
            return ref
    raise GoldUnavailable(f"no {tool_name or ''} ref containing {needle!r} in the observations")


def gold_plan(case: dict) -> dict:
    """The planner's gold output; a variant stores only its targets, and its scope is read from the
    question by the scope's one owner."""
    plan = dict(case["gold"]["plan"])
    if "scope" not in plan:
        from program.evidence.scope import read_scope
        from tools.catalog import active_catalog

        scope = read_scope(case["question"], active_catalog())
        plan.update(scope="narrow" if scope.narrow else "broad", excluded_topics=list(scope.excluded_topics))
    return plan


def gold_tool_calls(case: dict) -> list[dict]:
    return [{k: v for k, v in call.items() if v is not None} for call in case["gold"]["tool_calls"]]


def gold_executor_output(case: dict, observations: str) -> dict:
    claims = []
    for n, spec in enumerate(case["gold"]["claims"], start=1):
        bindings = []
        for b in spec["bindings"]:
            ref = find_ref(observations, b["needle"], b["tool_name"])
            bindings.append({"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id,
                             "raw_path": ref.raw_path, "evidence_excerpt": b.get("excerpt") or ref.text})
        claims.append({"claim_id": f"claim-{n}", "claim_type": spec["claim_type"], "claim_text": spec["claim_text"],
                       "evidence_bindings": bindings})
    missing = [{"info_id": f"missing-{n}", "description": text}
               for n, text in enumerate(case["gold"]["missing_info"] or [], start=1)]
    return {"claims": claims, "hypotheses": [], "missing_info": missing, "recommended_actions": []}


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


def gold_demos(cases: list[dict]) -> dict[str, list]:
    """Labeled demos per predictor, built by running each case's gold tool calls for real.

    The observations and ids in a demo come from an in-memory audit store, exactly as the executor
    would see them; the outputs are the case's gold plan, calls, claims, judgement and answer.
    """
    import dspy

    from program.entry.audit import AuditStore
    from program.evidence.answer import fact_line
    from program.evidence.hook import VerifierInputHook
    from signatures.contracts import (
        ExecutorOutput,
        ParseStatus,
        PlannerOutput,
        ToolCall,
    )
    from tools.recorder import ToolInvocationRecorder, render_observations

    store = AuditStore("sqlite://")
    demos: dict[str, list] = {"planner": [], "gather": [], "executor": [], "verifier": [], "composer": []}
    for case in cases:
        if not case["runs_lm"]:
            continue
        session = f"gold-{case['case_id']}"
        recorder = ToolInvocationRecorder(store, session)
        calls = [ToolCall(**call) for call in gold_tool_calls(case)]
        for call in calls:
            recorder.call(call.tool_name, **call.arguments())
        observations = render_observations(recorder.invocations)
        plan = PlannerOutput(**gold_plan(case))
        output = ExecutorOutput.model_validate(gold_executor_output(case, observations))
        verifier_input = VerifierInputHook(store).run(
            session_id=session, original_query=case["question"], executor_output=output,
            parse_status=ParseStatus(status="valid", detail="parsed executor evidence contract"))
        if verifier_input.gatekeeper_result.status != "pass":
            raise GoldUnavailable(f"gold citations of {case['case_id']} fail the gatekeeper: "
                                  f"{verifier_input.gatekeeper_result.failed_rules}")
        q = case["question"]
        demos["planner"].append(dspy.Example(question=q, plan=plan, tool_calls=calls).with_inputs("question"))
        demos["gather"].append(dspy.Example(question=q, plan=plan, observations=render_observations([]),
                                            tool_calls=calls).with_inputs("question", "plan", "observations"))
        demos["executor"].append(dspy.Example(
            question=q, plan=plan, observations=observations, retry_context="none", claims=output.claims,
            hypotheses=output.hypotheses, missing_info=output.missing_info,
            recommended_actions=output.recommended_actions).with_inputs("question", "plan", "observations", "retry_context"))
        demos["verifier"].extend(dspy.Example(
            question=q, claim=f"{c.claim_type}: {c.claim_text}", excerpts=[b.evidence_excerpt for b in c.evidence_bindings],
            judgement="supported", reason="the checked excerpts state it").with_inputs("question", "claim", "excerpts")
            for c in output.claims)
        demos["composer"].append(dspy.Example(
            question=q,
            verified_facts=[fact_line(c) for c in output.claims],
            hypotheses=[], missing_info=[m.description for m in output.missing_info],
            answer=case["gold"]["answer"]).with_inputs("question", "verified_facts", "hypotheses", "missing_info"))
    return demos
