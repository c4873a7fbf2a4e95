"""How long the citation step's prompts are, in the embedded model's own tokens, per candidate:
whether a compiled program's demos leave room in the context for the reply. No model is run; only
the GGUF file's vocabulary is read.

    .venv/bin/python benchmarks/prompt_tokens.py [candidate ...]   # default: per_kind knn stratified

For every held-out devset case, the prompt the compact adapter writes (the demos the program shows it,
the case's inputs) is counted; the longest and the mean are printed beside the room the engine
leaves: its context less the citation step's max_tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import signatures  # noqa: F401,E402  (keeps litellm offline before dspy loads)
import llama_cpp  # noqa: E402

from devset import devset_world, load_devset  # noqa: E402
from devset.recorded import record  # noqa: E402
from optimization.candidates import Settings, compile_candidate  # noqa: E402
from program.lm.adapter import ConstrainedJSONAdapter  # noqa: E402
from program.lm.engine import CONTEXT_TOKENS  # noqa: E402
from program.lm.models import EMBEDDED_MODELS, assemble  # noqa: E402
from program.stages.executor import Cite  # noqa: E402
from signatures.diagnosis import narrow_citation  # noqa: E402
from tools.functions import TOOLBOX  # noqa: E402

INPUTS = ("language", "question", "plan", "retry_context", "observations")


def main(argv: list[str]) -> int:
    names = argv or ["per_kind", "knn", "stratified"]
    vocabulary = llama_cpp.Llama(model_path=str(assemble(EMBEDDED_MODELS["embedded"])), vocab_only=True, verbose=False)
    with devset_world():
        evidence = record(load_devset(), TOOLBOX)
    examples = {case_id: recorded.example() for case_id, recorded in evidence.items()}
    train = [e for c, e in examples.items() if evidence[c].case["split"] == "train"]
    held = [e for c, e in examples.items() if evidence[c].case["split"] == "held-out"]
    settings = Settings(k=2, threshold=0.9, gepa_calls=1, gepa_val=1, mipro_trials=1, lm=None)
    programs = {"uncompiled": Cite(), **{n: compile_candidate(n, train, evidence, settings)[0] for n in names}}
    adapter = ConstrainedJSONAdapter(compact=True)
    room = CONTEXT_TOKENS - Cite().predict.config["max_tokens"]
    print(f"context {CONTEXT_TOKENS} tokens, less the reply's max_tokens: {room} for the prompt")
    for name, program in programs.items():
        sizes = []
        for example in held:
            signature = narrow_citation(program.predict.signature) if example.narrow else program.predict.signature
            messages = adapter.format(signature, program.demos_for(example.question, example.plan, example.language),
                                      {key: example[key] for key in INPUTS})
            text = "".join(m["content"] for m in messages)
            sizes.append(len(vocabulary.tokenize(text.encode(), add_bos=False)))
        print(f"{name:>12}: longest {max(sizes)}, mean {sum(sizes) // len(sizes)}"
              f"{'' if max(sizes) <= room else '  (does not fit)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
