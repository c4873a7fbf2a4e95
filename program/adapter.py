"""A JSONAdapter whose response schema can be narrowed per call.

Structured decoding (a llama.cpp grammar locally, strict JSON schema on providers that support it)
can only produce what the schema allows. Narrowing the schema per call is the strongest lever
against invented citations: the executor may only pick (tool_name, invocation id, raw_path)
triples that exist in this session, and the tool step only real service and alert names. The
excerpt stays free text, so the gatekeeper still checks every quote.

``compact=True`` drops the JSON schemas from the system prompt (the decoder enforces them anyway),
which shortens prompts for small local models.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import dspy
from dspy.adapters.utils import serialize_for_json
from pydantic import BaseModel

from signatures.contracts import TOOL_PARAMETERS, ToolInvocation

SchemaPatch = Callable[[dict], dict]
_patch: ContextVar[SchemaPatch | None] = ContextVar("schema_patch", default=None)
EXCERPT_MAX_CHARS = 200
TEXT_MAX_CHARS = 200


@contextmanager
def constrained(patch: SchemaPatch | None) -> Iterator[None]:
    token = _patch.set(patch)
    try:
        yield
    finally:
        _patch.reset(token)


class ConstrainedJSONAdapter(dspy.JSONAdapter):
    def __init__(self, *, compact: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.compact = compact

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        super()._prepare_response_format(lm, lm_kwargs, signature)
        patch = _patch.get()
        fmt = lm_kwargs.get("response_format")
        if patch is not None and isinstance(fmt, type) and issubclass(fmt, BaseModel):
            narrowed = patch(copy.deepcopy(fmt.model_json_schema()))
            # DSPy builds this model afresh for every call, so replacing its schema is local to the call.
            fmt.model_json_schema = lambda *args, **kwargs: narrowed

    def format_field_with_value(self, fields_with_values, role: str = "user") -> str:
        if not self.compact or role == "user":
            return super().format_field_with_value(fields_with_values, role=role)
        # One line, as grammar-constrained decoding writes it: demos in DSPy's indented layout
        # differ from what the grammar lets the model emit, and a small model then stops copying them.
        values = {field.name: value for field, value in fields_with_values.items()}
        return json.dumps(serialize_for_json(values), ensure_ascii=False)

    def format_field_structure(self, signature) -> str:
        if not self.compact:
            return super().format_field_structure(signature)
        inputs = ", ".join(f"[[ ## {name} ## ]]" for name in signature.input_fields)
        outputs = ", ".join(f'"{name}"' for name in signature.output_fields)
        return f"Inputs come in sections {inputs}. Answer with one JSON object with the keys {outputs}."


def adapter_for(lm) -> ConstrainedJSONAdapter:
    """Compact prompts for the embedded model, whose decoder enforces the schema anyway."""
    from program.lm import is_embedded

    return ConstrainedJSONAdapter(compact=is_embedded(lm))


def _set_lengths(schema: dict, max_items: dict[str, int]) -> None:
    """Bound list sizes by property name and every free string, so a looping model stops."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for name, prop in (node.get("properties") or {}).items():
            if isinstance(prop, dict) and prop.get("type") == "array" and name in max_items:
                prop["maxItems"] = max_items[name]
            if isinstance(prop, dict) and prop.get("type") == "string" and "enum" not in prop:
                prop.setdefault("maxLength", TEXT_MAX_CHARS)
        stack.extend(v for v in node.values() if isinstance(v, dict))
        for value in node.values():
            if isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, dict))


def citation_patch(invocations: list[ToolInvocation]) -> SchemaPatch:
    """Evidence bindings may only name citations that exist in this session."""
    options = []
    for inv in invocations:
        details = inv.retrieval_details
        for ref in details.evidence_refs:
            options.append((inv.tool_name, inv.id, ref.raw_path))
        if details.evidence_status == "no_evidence":
            options.append((inv.tool_name, inv.id, None))

    def patch(schema: dict) -> dict:
        # Bindings are unlimited by design; 8 only stops a looping model and is above every gold case.
        _set_lengths(schema, {"claims": 3, "evidence_bindings": 8, "hypotheses": 1, "missing_info": 2,
                              "recommended_actions": 1, "basis_claim_ids": 2})
        defs = schema.get("$defs", {})
        if options and "EvidenceBinding" in defs:
            defs["EvidenceBinding"] = {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "tool_name": {"const": tool},
                            "source_invocation_id": {"const": inv_id},
                            "raw_path": {"const": path} if path else {"type": "null"},
                            "evidence_excerpt": {"type": "string", "maxLength": EXCERPT_MAX_CHARS},
                        },
                        "required": ["tool_name", "source_invocation_id", "raw_path", "evidence_excerpt"],
                        "additionalProperties": False,
                    }
                    for tool, inv_id, path in options
                ]
            }
        return schema

    return patch


def tool_call_patch(services: list[str], alert_names: list[str]) -> SchemaPatch:
    """Each call carries only its tool's arguments (the others must be null), real service and alert
    names, and at most four calls. Every shape keeps ToolCall's field order, which is the order
    demos are written in: a grammar that disagreed with the demos would stop a small model from
    following them."""
    service = {"anyOf": [{"enum": sorted(services)}, {"type": "null"}]}
    null = {"type": "null"}
    arguments = {
        "query": {"type": "string", "maxLength": 80},
        "service": service,
        "alert_name": {"anyOf": [{"enum": sorted(set(alert_names))}, {"type": "null"}]},
        "level": {"anyOf": [{"enum": ["DEBUG", "INFO", "WARN", "ERROR"]}, {"type": "null"}]},
        "state": {"anyOf": [{"enum": ["firing", "resolved"]}, {"type": "null"}]},
    }

    def patch(schema: dict) -> dict:
        _set_lengths(schema, {"tool_calls": 4})
        if "ToolCall" in schema.get("$defs", {}):
            shapes = []
            for tool, accepted in TOOL_PARAMETERS.items():
                props = {"tool_name": {"const": tool}}
                props.update({name: arguments[name] if name in accepted else null for name in arguments})
                shapes.append({"type": "object", "properties": props, "required": list(props),
                               "additionalProperties": False})
            schema["$defs"]["ToolCall"] = {"anyOf": shapes}
        return schema

    return patch


def length_patch(max_items: dict[str, int]) -> SchemaPatch:
    def patch(schema: dict) -> dict:
        _set_lengths(schema, max_items)
        return schema

    return patch
