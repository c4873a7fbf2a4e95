"""What an engine sends: a DSPy 3.4 request as chat turns, and the grammar of a response schema.
The embedded engine and the server engine send the same turns and, where a server reads a grammar,
the same grammar."""

from __future__ import annotations

import re

# llama.cpp's schema grammar allows no newline between JSON tokens, but Qwen writes indented JSON:
# denied a newline, greedy decoding closes every list at once. Allow newlines and indentation.
GRAMMAR_SPACE = 'space ::= | " " | "\\n" [ \\t]{0,24}'


def text_of(parts) -> str:
    """The text of a DSPy 3.4 request part list (or a plain string)."""
    if parts is None:
        return ""
    if isinstance(parts, str):
        return parts
    return "".join(getattr(p, "text", "") or "" for p in parts)


def chat_messages(request) -> list[dict]:
    """The request as chat turns, for the GGUF's own chat template."""
    messages = [{"role": "system", "content": text_of(request.system).strip()}] if request.system else []
    for message in request.messages:
        role = "assistant" if message.role == "assistant" else "user"
        messages.append({"role": role, "content": (message.text or "").strip()})
    return messages


def schema_grammar_text(schema_json: str) -> str:
    """The GBNF grammar of a JSON schema, as llama-cpp-python converts it, with newlines allowed."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(schema_json)
    return re.sub(r"^space ::= .*$", lambda _: GRAMMAR_SPACE, gbnf, count=1, flags=re.MULTILINE)
