"""`python -m program.entry.warm [--lm embedded]`: ready this machine for a fast first diagnosis.

It assembles and checks the embedded model, runs the engine probe (which is then remembered), and
saves the prefix state of every stage prompt the program sends (the planner's, the tool rounds',
the executor's for narrow and for broad questions, the verifier's and the composer's, each stage
that is shown demos in the answer's language once per language), so that
even the first `ask` after an install starts from saved prefixes instead of reading about 3,000
prompt tokens again. A prefix already saved is not read again, so a second run costs seconds. It
warms the program `diagnose()` would run: the newest compiled program for this LM, or the shipped
one. Nothing is diagnosed and no audit record is written.
"""

from __future__ import annotations

import argparse
import sys
from typing import get_args

import dspy

from contracts import Language
from program.lm.adapter import ConstrainedJSONAdapter
from program.stages.compiled import load_program
from program.lm.engine import EMBEDDED, LlamaEngine, preflight, resolve_lm
from program.stages.pipeline import Diagnosis
from program.lm.prefix_cache import PrefixUse
from signatures.demos import for_language
from signatures.diagnosis import narrow_citation


def stage_calls(program: Diagnosis) -> list[tuple[str, type[dspy.Signature], list]]:
    """(usage key, signature, demos) of every stage call the program can make. A stage that is shown
    only the demos in the answer's language has a prompt per language, where its demos differ."""
    executor = program.executor.predict
    stages = [("planner", program.planner.signature, program.planner.demos),
              ("gather", program.gather.signature, program.gather.demos),
              ("executor (narrow)", narrow_citation(executor.signature), executor.demos),
              ("executor (broad)", executor.signature, executor.demos),
              ("verifier", program.verifier.signature, program.verifier.demos),
              ("composer", program.composer.signature, program.composer.demos)]
    calls = []
    for key, signature, demos in stages:
        if "language" not in signature.input_fields or all(d.get("language") is None for d in demos):
            calls.append((key, signature, demos))
            continue
        calls += [(f"{key} [{language}]", signature, for_language(demos, language)) for language in get_args(Language)]
    return calls


def chat_turns(signature: type[dspy.Signature], demos: list) -> list[dict]:
    """A call's chat turns as the compact adapter renders them, with empty inputs: everything before
    the last turn (the system message and the demos) is the call's static prefix."""
    inputs = {name: "" for name in signature.input_fields}
    messages = ConstrainedJSONAdapter(compact=True).format(signature, demos, inputs)
    return [{"role": m["role"], "content": str(m["content"]).strip()} for m in messages]


def warm(spec: str = EMBEDDED) -> list[tuple[str, PrefixUse]]:
    """Save every stage's prefix state for the embedded model `spec`; what each stage got."""
    lm = resolve_lm(spec)
    if not isinstance(lm.engine, LlamaEngine):
        raise ValueError(f"{spec!r} is not an embedded model: only the embedded engine keeps prefix states")
    if problem := preflight(lm):
        raise RuntimeError(f"the language model cannot be used ({problem[0]}): {problem[1]}")
    program = load_program(None, lm)[0] or Diagnosis()
    return [(key, lm.engine.warm(chat_turns(signature, demos))) for key, signature, demos in stage_calls(program)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default=EMBEDDED, help="the embedded model to warm (default: embedded)")
    args = parser.parse_args(argv)
    try:
        uses = warm(args.lm)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for key, use in uses:
        how = {"read": "read now and saved", "disk": "already saved", "memory": "already saved"}.get(use.source, "none")
        print(f"{key}: {use.prefix_tokens} prefix tokens, {use.state_bytes / 1e6:.1f} MB of state, {how} "
              f"({use.seconds:.1f} s){'; ' + use.note if use.note else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
