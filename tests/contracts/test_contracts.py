"""The contracts on their own: what each accepts and refuses, before any layer above reads them."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from contracts import (
    LOCATOR,
    MAX_EXCERPT_CHARS,
    MAX_ITEMS,
    RAW_PATH_IN_TEXT,
    Claim,
    EvidenceBinding,
    ExecutorOutput,
    ToolInvocation,
    raw_path,
)
from contracts.record import DiagnosisResult


def binding(**fields) -> dict:
    return {"tool_name": "query_logs", "source_invocation_id": 1, "raw_path": "$.logs[0]",
            "evidence_excerpt": "Connection is not available", **fields}


def test_a_locator_reads_back_what_raw_path_writes_and_nothing_else():
    assert LOCATOR.match(raw_path("logs", 12)).groups() == ("logs", "12")
    for written in ("$.logs[01]", "$.logs[-1]", "$.logs[1] ", "$.Logs[1]", "$.logs[1][2]", "logs[1]"):
        assert LOCATOR.match(written) is None, written
    assert raw_path("alerts", "i") == "$.alerts[i]"
    assert re.findall(RAW_PATH_IN_TEXT, "#3 $.alerts[0] §2 and #4 $.logs[12]") == ["$.alerts[0]", "$.logs[12]"]


@pytest.mark.parametrize("invocation_id", ["1", True, 2.0, "one"])
def test_an_invocation_id_is_an_integer_and_nothing_that_looks_like_one(invocation_id):
    with pytest.raises(ValidationError):
        EvidenceBinding.model_validate(binding(source_invocation_id=invocation_id))


def test_an_lm_facing_contract_refuses_a_field_it_does_not_know_and_a_tool_record_ignores_it():
    with pytest.raises(ValidationError, match="extra"):
        EvidenceBinding.model_validate(binding(confidence=0.9))
    record = ToolInvocation.model_validate({"id": 1, "session_id": "s", "tool_name": "query_logs",
                                            "retrieval_details": {"evidence_status": "no_evidence"},
                                            "exported_by": "a spreadsheet"})
    assert record.retrieval_details.unread == [] and not hasattr(record, "exported_by")


def test_the_bounds_refuse_what_a_looping_lm_writes_and_name_the_limit():
    with pytest.raises(ValidationError, match=f"at most {MAX_EXCERPT_CHARS} are accepted"):
        EvidenceBinding.model_validate(binding(evidence_excerpt="x" * (MAX_EXCERPT_CHARS + 1)))
    claim = {"claim_id": "c1", "claim_type": "observation", "claim_text": "t", "evidence_bindings": [binding()]}
    ExecutorOutput.model_validate({"claims": [claim] * MAX_ITEMS})
    with pytest.raises(ValidationError, match=f"claims has {MAX_ITEMS + 1} items"):
        ExecutorOutput.model_validate({"claims": [claim] * (MAX_ITEMS + 1)})
    with pytest.raises(ValidationError):
        Claim.model_validate({**claim, "claim_type": "guess"})


def test_a_result_survives_json_as_the_server_and_the_cli_send_it():
    result = DiagnosisResult.model_json_schema()
    assert {"verdict", "answer", "claims"} <= set(result["properties"])
    assert json.loads(json.dumps(result))["properties"]["verdict"]["enum"] == ["PASS", "LOW_CONFID", "REJECT"]
