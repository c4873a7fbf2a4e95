"""benchmarks/recorded_serve.py records every LM call of a `serve` once, although `serve` resolves
the LM it was given again further in."""

import json

from benchmarks import recorded_serve
from tests.support.scripted import scripted_lm


def test_an_lm_resolved_twice_records_each_call_once(tmp_path, monkeypatch):
    transcript = tmp_path / "transcript.jsonl"
    monkeypatch.setenv("DIAGNOSIS_TRANSCRIPT", str(transcript))
    monkeypatch.setattr(recorded_serve, "resolve", lambda spec=None: spec)
    lm = recorded_serve.recorded(recorded_serve.recorded(scripted_lm(lambda stage, user, demos: {"answer": "ok"})))
    lm("[[ ## question ## ]]\nq")
    assert len(transcript.read_text(encoding="utf-8").splitlines()) == 1
    assert json.loads(transcript.read_text(encoding="utf-8"))["reply"]
