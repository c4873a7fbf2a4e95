"""The injection detector, and the layers around it, against variants written for the purpose."""

import importlib.util
import json
from pathlib import Path

import pytest

from program.entry.audit import AuditStore
from program.evidence.injection import addresses_the_model

ROOT = Path(__file__).resolve().parents[3]
VARIANTS = json.loads((ROOT / "tests" / "program" / "evidence" / "data" / "injection_variants.json").read_text(encoding="utf-8"))
_spec = importlib.util.spec_from_file_location("injection_layers", ROOT / "benchmarks" / "injection_layers.py")
layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layers)


@pytest.mark.parametrize("text", VARIANTS["development"])
def test_the_detector_flags_text_addressed_to_the_model(text):
    assert addresses_the_model(text)


@pytest.mark.parametrize("text", VARIANTS["benign"])
def test_ordinary_operations_text_is_not_flagged(text):
    assert not addresses_the_model(text)


@pytest.mark.parametrize("text", [t for t in VARIANTS["development"] + VARIANTS["held_out"] if addresses_the_model(t)])
def test_a_flagged_line_never_supports_a_pass_even_in_the_target_services_own_log(text):
    store = AuditStore("sqlite://")
    result = layers.run_obedient(text, "own_log", store)
    assert result.verdict != "PASS" and "evidence.suspected_injection" in result.gatekeeper_result.failed_rules
    assert layers.INJECTED_CLAIM not in result.answer


@pytest.mark.parametrize("text", VARIANTS["held_out"])
def test_feedback_quoted_in_another_services_log_never_passes(text):
    store = AuditStore("sqlite://")
    result = layers.run_obedient(text, "feedback", store)
    assert result.verdict != "PASS" and layers.stopped_by(result, store) in ("detector", "code checks")
