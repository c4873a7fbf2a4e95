"""`diagnose()`: the Python entry point."""

from __future__ import annotations

import dspy

from program.store.audit import AuditStore
from program.store.storable import storable, written
from program.evidence.language import answer_language
from program.lm.adapter import adapter_for
from program.stages.compiled import load_program
from program.lm.engine import resolve_lm
from program.stages.pipeline import Diagnosis
from contracts.record import DiagnosisResult


def diagnose(question: str, lm: str | dspy.BaseLM | None = None, db: str | AuditStore | None = None, *,
             program: Diagnosis | None = None, compiled: bool = True, progress=None,
             language: str | None = None, session_id: str | None = None) -> DiagnosisResult:
    """Diagnose one question and store the audit record.

    lm: a model string (any DSPy/litellm model, or "embedded"), an LM object, or None for
    DIAGNOSIS_LM / the embedded default. db: an SQLAlchemy URL or an AuditStore; None uses
    DIAGNOSIS_DB or the default SQLite file. program: a Diagnosis to run; otherwise the newest
    compiled program is loaded when it was compiled for this LM (see optimize.py) unless
    compiled=False, and the record notes which program ran or why the uncompiled one did.
    language: zh, en or auto, the answer's (the sentences code writes and what the LM stages
    write); None: DIAGNOSIS_LANGUAGE, else the question's own language. session_id: the id to
    record the run under; None: a new one. An id already recorded is refused (SessionIdRefused)
    unless this process claimed it from the store's queue (AuditStore.claim_pending).
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    if storable(question)[1]:
        # Bytes that are not UTF-8 reach Python as lone surrogates: such a question is not text.
        raise ValueError("question must be UTF-8 text, without NUL or lone surrogates")
    language = answer_language(question, language)
    store = db if isinstance(db, AuditStore) else AuditStore(db)
    # The LM first: a compiled program is loaded only for the LM it was compiled for.
    model = resolve_lm(lm)
    note = None
    if program is None and compiled:
        program, note = load_program(store, model)
    program = program or Diagnosis(store=store)
    program.store = store
    program.progress = progress
    with dspy.context(lm=model, adapter=adapter_for(model)):
        result = program(question=question.strip(), session_id=session_id, language=language,
                         notes=[note] if note else None).result
    # An LM may write what JSON cannot print, and an error may name a URL with its password: the
    # result says it as the audit record keeps it.
    shown, changed = written(result.model_dump(mode="json"))
    return DiagnosisResult.model_validate(shown) if changed else result
