"""Grounded Diagnosis: the pipeline, gatekeeper, hook, audit store, LM setup and CLI.

`from program import diagnose` is resolved lazily so that deterministic entry points such as
`python -m program.evidence.gatekeeper` do not pay for importing DSPy.
"""

import signatures  # noqa: F401  (keeps litellm offline before anything imports dspy)


def __getattr__(name):
    if name == "diagnose":
        from program.entry.api import diagnose

        return diagnose
    raise AttributeError(name)


__all__ = ["diagnose"]
