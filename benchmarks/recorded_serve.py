"""`benchmarks/recorded_serve.py <arguments of python -m program>`: the real command line, with the LM
it resolves recording every request and reply to the file DIAGNOSIS_TRANSCRIPT names, so that a
benchmark of `serve` keeps the transcript behind its figures (benchmarks/scale_out.py)."""

from __future__ import annotations

import os
import sys

from program.entry import api, cli
from program.lm import engine
from program.lm.transcript import RecordingEngine, recording_lm

resolve = engine.resolve_lm


def recorded(spec=None):
    lm = resolve(spec)
    # `serve` resolves the LM it was given again further in: record through one engine only.
    if isinstance(getattr(lm, "engine", None), RecordingEngine):
        return lm
    return recording_lm(lm, os.environ["DIAGNOSIS_TRANSCRIPT"], serve_repeats=False)


if __name__ == "__main__":
    engine.resolve_lm = api.resolve_lm = recorded
    sys.exit(cli.main(sys.argv[1:]))
