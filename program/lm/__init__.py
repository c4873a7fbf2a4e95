"""The LM layer: the embedded engine and its models, the constrained adapter, transcripts, and the
DSPy program whose stages call the LM (planner, executor, verifier, composer)."""
