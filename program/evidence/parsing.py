"""Salvage the executor's output from LM text that did not parse as a whole.

Each claim draft, hypothesis, gap and action is validated on its own; the valid ones are kept and
the rest are named in the parse status. Anything dropped makes the output "repaired", which the
gatekeeper treats as low confidence: malformed output never passes, and nothing valid is lost.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from contracts import (
    ClaimDraft,
    EvidenceBinding,
    Hypothesis,
    MissingInfo,
    ParseStatus,
    RecommendedAction,
    RefJudgement,
)

FIELDS: dict[str, type[BaseModel]] = {
    "claims": ClaimDraft,
    "hypotheses": Hypothesis,
    "missing_info": MissingInfo,
    "recommended_actions": RecommendedAction,
}


# The executor's decisions on the refs: optional (an LM may write none), and read into one decision per label.
DECISIONS = "ref_decisions"


def _decisions(value: Any, problems: list[str]) -> dict[str, str]:
    """The decisions that name a label and one of the closed set, by label; the others are named as dropped."""
    if not isinstance(value, list):
        problems.append(f"{DECISIONS} is {type(value).__name__}, not a list")
        return {}
    kept = {}
    for i, item in enumerate(value):
        try:
            judged = RefJudgement.model_validate(item)
        except ValidationError as exc:
            problems.append(f"{DECISIONS}[{i}] dropped: {exc.errors()[0].get('msg')}")
            continue
        kept[judged.ref] = judged.decision
    return kept


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        pass
    try:
        import json_repair

        return json_repair.loads(text)
    except Exception:  # json_repair raises assorted errors on hopeless input
        return None


def _strip_unknown(model: type[BaseModel], item: dict) -> dict:
    known = set(model.model_fields)
    cleaned = {k: v for k, v in item.items() if k in known}
    if "evidence_bindings" in cleaned and isinstance(cleaned["evidence_bindings"], list):
        allowed = set(EvidenceBinding.model_fields)
        cleaned["evidence_bindings"] = [
            {k: v for k, v in b.items() if k in allowed} if isinstance(b, dict) else b
            for b in cleaned["evidence_bindings"]
        ]
    return cleaned


def salvage_executor_output(text: str | None, expected: tuple[str, ...] = tuple(FIELDS)) -> tuple[dict[str, list],
                                                                                                ParseStatus]:
    """Every field's valid items (claims as drafts, whose labels are still to be expanded);
    `expected` are the fields the LM was asked for, and only those are read: a narrow question
    asks for no hypotheses or actions, so any in the text are not taken."""
    data = _load(text or "")
    if not isinstance(data, dict):
        snippet = (text or "")[:200]
        return {name: [] for name in FIELDS}, ParseStatus(status="invalid",
                                                           detail=f"no JSON object in LM output: {snippet!r}")
    kept: dict[str, Any] = {name: [] for name in FIELDS}
    problems: list[str] = []
    kept[DECISIONS] = _decisions(data.get(DECISIONS, []), problems) if DECISIONS in expected else {}
    for name in (n for n in expected if n != DECISIONS):
        model = FIELDS[name]
        items = data.get(name, [])
        if not isinstance(items, list):
            problems.append(f"{name} is {type(items).__name__}, not a list")
            items = []
        for i, item in enumerate(items):
            try:
                kept[name].append(model.model_validate(item))
                continue
            except ValidationError as exc:
                first_error = exc.errors()[0]
            if isinstance(item, dict):
                try:
                    kept[name].append(model.model_validate(_strip_unknown(model, item)))
                    problems.append(f"{name}[{i}] had unknown fields, which were dropped")
                    continue
                except ValidationError as exc:
                    first_error = exc.errors()[0]
            where = ".".join(str(p) for p in first_error.get("loc", ()))
            problems.append(f"{name}[{i}] dropped: {where or 'item'}: {first_error.get('msg')}")
    missing = [name for name in expected if name not in data and name != DECISIONS]
    if missing:
        problems.append(f"missing field(s) {', '.join(missing)}")
    # The adapter already refused this text, so even a clean salvage is not a valid output.
    return kept, ParseStatus(
        status="repaired", detail="; ".join(problems) or "the adapter could not parse it; every item was recovered"
    )
