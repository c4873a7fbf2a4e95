"""The evidence layer, deterministic: excerpt matching, the gatekeeper and its hook, the trace
summary, the scope of a question, the claim rules and the verdict table, and the answer checks.
Nothing here calls an LM."""
