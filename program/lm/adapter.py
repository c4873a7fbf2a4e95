"""A JSONAdapter whose response schema can be narrowed per call.

Structured decoding (a llama.cpp grammar locally, strict JSON schema on providers that support it)
can only produce what the schema allows. Narrowing the schema per call is the strongest lever
against invented citations: the executor may only point at labels of this session's citations,
and the tool step may only name real services and alerts.

Cite by pointing, not by writing: under constraints, a binding is one label of the session's
citation menu (program/evidence/citations.py), and code writes the quote it names, as Anthropic's
Citations API lets the model point at a passage instead of typing it. The gatekeeper still checks
every expanded binding: it is the assertion for every LM, including hosted ones that cannot be
constrained and may quote instead. An LM whose schemas are narrowed but that cannot be sent one (a
server under DIAGNOSIS_LM_SCHEMA=none) is told the narrowed schema in its prompt instead.

``compact=True`` drops the JSON schemas from the system prompt (the decoder enforces them anyway),
which shortens prompts for small local models.

A narrowing travels with its call, as ``predict(..., config=narrowing(patch))``, and the adapter
takes it out of the call's settings. Applying it takes one private hook of DSPy's,
JSONAdapter._prepare_response_format, and stating it in a prompt DSPy's private schema builder,
_get_structured_outputs_response_format: both present in DSPy 3.4.1, the pinned version and the
only one this was checked on; DSPy 3.3.1 builds the response format inside JSONAdapter.__call__
and has no such hook. The public seams do not suffice (tests/program/lm/test_adapter.py): DSPy builds the
schema from each output field's type alone, so a bound declared on a field never reaches it, and
it replaces a response_format given with the call by its own; yet every stage's narrowing bounds a
top-level field, and the verifier's is not an object of fields at all.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from contextvars import ContextVar
from typing import get_args

import dspy
from dspy.adapters.json_adapter import _get_structured_outputs_response_format
from dspy.adapters.utils import serialize_for_json
from pydantic import BaseModel, TypeAdapter, ValidationError

from program.evidence.citations import Menu
from program.evidence.parsing import DECISIONS
from contracts import (
    NARROW_MAX_CLAIMS,
    NARROW_MIN_CLAIMS,
    NARROW_TYPES,
    ClaimDraft,
    ClaimType,
    PlanDraft,
    RefDecision,
)
from tools.calls import ToolCallContract
from tools.catalog import Catalog
from tools.declaration import Toolbox

SchemaPatch = Callable[[dict], dict]
# The narrowed schema of the call being formatted, when the LM cannot be sent it: its prompt says it.
_stated: ContextVar[dict | None] = ContextVar("stated_schema", default=None)
# The key of a call's config that carries its narrowing to the adapter, which takes it out.
SCHEMA_PATCH = "schema_patch"
TEXT_MAX_CHARS = 200
QUERY_MAX_CHARS = 80
BROAD_MAX_CLAIMS = 4


def narrowing(patch: SchemaPatch) -> dict:
    """The config of one predictor call whose response schema `patch` narrows."""
    return {SCHEMA_PATCH: patch}


class ConstrainedJSONAdapter(dspy.JSONAdapter):
    def __init__(self, *, compact: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.compact = compact

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        # First, so that it never reaches the LM, even when DSPy sends no schema. Under a DSPy
        # without this hook it would, and DSPy's request refuses a setting it does not know: the
        # stage fails closed instead of running unconstrained.
        patch = lm_kwargs.pop(SCHEMA_PATCH, None)
        _stated.set(None)
        super()._prepare_response_format(lm, lm_kwargs, signature)
        fmt = lm_kwargs.get("response_format")
        if patch is None:
            return
        if isinstance(fmt, type) and issubclass(fmt, BaseModel):
            lm_kwargs["response_format"] = _with_schema(fmt, patch(copy.deepcopy(fmt.model_json_schema())))
        else:
            # The LM takes no schema: its prompt states the narrowed one (user_message_output_requirements).
            _stated.set(patch(copy.deepcopy(_get_structured_outputs_response_format(signature).model_json_schema())))

    def user_message_output_requirements(self, signature) -> str:
        text = super().user_message_output_requirements(signature)
        stated = _stated.get()
        if stated is None:
            return text
        return f"{text} The JSON object must match this JSON schema: {json.dumps(stated, ensure_ascii=False)}"

    def format_field_with_value(self, fields_with_values, role: str = "user") -> str:
        if not self.compact or role == "user":
            return super().format_field_with_value(fields_with_values, role=role)
        # One line, as grammar-constrained decoding writes it: demos in DSPy's indented layout
        # differ from what the grammar lets the model emit, and a small model then stops copying them.
        values = {field.name: _as_emitted(value, field.info.annotation) for field, value in fields_with_values.items()}
        return json.dumps(serialize_for_json(values), ensure_ascii=False)

    def format_field_structure(self, signature) -> str:
        if not self.compact:
            return super().format_field_structure(signature)
        inputs = ", ".join(f"[[ ## {name} ## ]]" for name in signature.input_fields)
        outputs = ", ".join(f'"{name}"' for name in signature.output_fields)
        return f"Inputs come in sections {inputs}. Answer with one JSON object with the keys {outputs}."


def field_value(user_message: str, name: str) -> str:
    """The text of one input field in a user message as DSPy's JSON and chat adapters write it
    (`[[ ## name ## ]]` and its value, up to the next field or the closing instruction); "" if absent."""
    match = re.search(rf"\[\[ ## {name} ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", user_message, re.S)
    return match.group(1) if match else ""


def _with_schema(model: type[BaseModel], schema: dict) -> type[BaseModel]:
    """DSPy's response model for this call, reporting `schema` as its JSON schema. DSPy sends a
    model's JSON schema, shaped for strict mode, so the narrowed schema is shaped as DSPy's own
    would be, and DSPy's model is left as it built it."""

    class Narrowed(model):
        @classmethod
        def model_json_schema(cls, *args, **kwargs) -> dict:
            return schema

    # The name goes out with the schema.
    Narrowed.__name__ = Narrowed.__qualname__ = model.__name__
    return Narrowed


def _as_emitted(value, annotation):
    """A demo value as the grammar lets the model write it: a tool call carries only its own
    arguments, a claim the LM did not number carries no claim_id, and a plan leaves out the lists
    it may omit. A demo loaded from a saved program holds plain dicts, so the value is read as its
    field's type first."""
    try:
        value = TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return value
    if isinstance(value, list) and value and all(isinstance(v, ToolCallContract) for v in value):
        return [{"tool_name": v.tool_name, **{k: getattr(v, k, None) for k in v.toolbox.get(v.tool_name).lm_arguments}}
                for v in value]
    if isinstance(value, list) and value and all(isinstance(v, ClaimDraft) for v in value):
        return [v.model_dump(exclude={"claim_id"} if v.claim_id is None else set()) for v in value]
    if isinstance(value, PlanDraft):
        return value.model_dump(exclude_defaults=True)
    return value


def adapter_for(lm) -> ConstrainedJSONAdapter:
    """Compact prompts for the LMs whose schemas are narrowed (narrows): the decoder enforces the
    schema, or the prompt states it."""
    from program.lm.engine import narrows

    return ConstrainedJSONAdapter(compact=narrows(lm))


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


def _claim_branch(claim_type: str, labels: list[str], pointing: bool = False) -> dict:
    """A claim of one type that may cite only these labels: its type first, then what it cites,
    then what it says (pointing: nothing, for code quotes what it cites)."""
    return {
        "type": "object",
        "properties": {
            "claim_type": {"const": claim_type},
            # Bindings are unlimited by design; 8 only stops a looping model and is above every gold case.
            "evidence_bindings": {"type": "array", "items": {"enum": labels}, "minItems": 1, "maxItems": 8},
            "claim_text": {"const": ""} if pointing else {"type": "string", "maxLength": TEXT_MAX_CHARS},
        },
        "required": ["claim_type", "evidence_bindings", "claim_text"],
        "additionalProperties": False,
    }


def citation_patch(menu: Menu, *, narrow: bool = False, pointing: bool = False) -> SchemaPatch:
    """Claims follow the evidence: a binding is one label of this session's menu; an observation
    (or, broad, a root cause or risk) cites only refs, a negative_observation only no-hits, and a
    claim type whose citations the session lacks is not offered. A narrow question gets one or two
    claims. An action's bindings may only name real refs and no-hits. pointing: claims write no
    text, and code quotes what they cite (`Menu.expand`)."""
    types = NARROW_TYPES if narrow else get_args(ClaimType)
    branches = [_claim_branch(t, labels, pointing) for t in types
                if (labels := menu.no_hits if t == "negative_observation" else menu.hits)]
    # Ref text never goes into the grammar (llama.cpp's converter cannot parse every quote in a
    # literal); the gatekeeper checks the excerpt. A cap below the longest ref would cut whole-ref
    # quotes in the middle of a number.
    longest = max((len(c.excerpt) for c in menu.citations.values()), default=TEXT_MAX_CHARS)
    actions = [{
        "type": "object",
        "properties": {"tool_name": {"const": c.tool_name}, "source_invocation_id": {"const": c.invocation_id},
                       "raw_path": {"const": c.raw_path} if c.hit else {"type": "null"},
                       "evidence_excerpt": {"type": "string", "maxLength": longest}},
        "required": ["tool_name", "source_invocation_id", "raw_path", "evidence_excerpt"],
        "additionalProperties": False,
    } for c in menu.citations.values() if c.label in menu.refs]

    decided = menu.refs

    def patch(schema: dict) -> dict:
        # missing_info is not limited (the design says so); the token budget bounds it.
        _set_lengths(schema, {"claims": NARROW_MAX_CLAIMS if narrow else BROAD_MAX_CLAIMS, "evidence_bindings": 8,
                              "hypotheses": 1, "recommended_actions": 1, "basis_claim_ids": 2})
        claims = schema.get("properties", {}).get("claims")
        if narrow and claims is not None:
            claims["minItems"] = NARROW_MIN_CLAIMS
        defs = schema.get("$defs", {})
        if branches and "ClaimDraft" in defs:
            defs["ClaimDraft"] = {"anyOf": branches}
        if actions and "EvidenceBinding" in defs:
            defs["EvidenceBinding"] = {"anyOf": actions}
        _decide_first(schema, decided)
        return schema

    return patch


def _decide_first(schema: dict, labels: list[str]) -> None:
    """One decision for each ref offered, in the order the observations show them, written before
    any claim: the grammar writes every label, and the model chooses only the decision."""
    properties = schema.get("properties", {})
    if DECISIONS not in properties or not labels:
        return
    properties[DECISIONS] = {"type": "array", "prefixItems": [{
        "type": "object", "properties": {"ref": {"const": label}, "decision": {"enum": list(get_args(RefDecision))}},
        "required": ["ref", "decision"], "additionalProperties": False} for label in labels],
        "minItems": len(labels), "maxItems": len(labels)}
    # The field has a default (an LM given no schema may leave it out), so DSPy does not require it;
    # under the grammar it is required, and in the signature's order, before the claims.
    schema["required"] = [name for name in properties if name in {*schema.get("required", ()), DECISIONS}]


def _argument_schema(schema: dict) -> dict:
    """A declared argument's JSON schema as the grammar takes it: no defaults or titles, and every
    free string bounded."""
    kept = {k: copy.deepcopy(v) for k, v in schema.items() if k not in ("default", "description", "title")}
    for branch in [kept, *kept.get("anyOf", [])]:
        if branch.get("type") == "string" and "enum" not in branch:
            branch["maxLength"] = QUERY_MAX_CHARS
    return kept


def tool_call_patch(catalog: Catalog, toolbox: Toolbox, *, min_calls: int = 0,
                    asked: dict[str, tuple[str, ...]] | None = None) -> SchemaPatch:
    """Each call carries only its tool's declared arguments, in the declared order (the order demos
    are written in: a grammar that disagreed with the demos would stop a small model from following
    them); arguments the declaration ties to the catalog take only its names (or null), and the
    names of that field the question spells that no source knows (`asked`), so that the grammar
    never swaps a name the user wrote for another; at most four calls."""
    null = {"type": "null"}
    shapes = []
    for declaration in toolbox:
        # Only the tool's own arguments: writing the others as null costs tokens and says nothing.
        props: dict = {"tool_name": {"const": declaration.name}}
        for name in declaration.lm_arguments:
            field = declaration.catalog_values.get(name)
            if field is None:
                props[name] = _argument_schema(declaration.tool.args[name])
            else:
                # A source that named nothing (a server that did not answer) leaves only null.
                values = list(dict.fromkeys([*getattr(catalog, field), *(asked or {}).get(field, ())]))
                props[name] = {"anyOf": [{"enum": values}, null]} if values else null
        shapes.append({"type": "object", "properties": props, "required": list(props), "additionalProperties": False})

    def patch(schema: dict) -> dict:
        _set_lengths(schema, {"tool_calls": 4})
        if min_calls and "tool_calls" in schema.get("properties", {}):
            schema["properties"]["tool_calls"]["minItems"] = min_calls
        if "ToolCall" in schema.get("$defs", {}):
            schema["$defs"]["ToolCall"] = {"anyOf": copy.deepcopy(shapes)}
        return schema

    return patch


def length_patch(max_items: dict[str, int]) -> SchemaPatch:
    def patch(schema: dict) -> dict:
        _set_lengths(schema, max_items)
        return schema

    return patch


def chain(*patches: SchemaPatch) -> SchemaPatch:
    def patch(schema: dict) -> dict:
        for each in patches:
            schema = each(schema)
        return schema

    return patch


def choices_patch(definition: str, name: str, choices: tuple[str, ...], max_items: int) -> SchemaPatch:
    """Make a model's list-of-strings property a list of these choices only; with no choices,
    leave it out (the contract's default, an empty list, stands in), so the LM does not spend
    tokens writing an empty list."""

    def patch(schema: dict) -> dict:
        target = schema.get("$defs", {}).get(definition, {})
        prop = target.get("properties", {}).get(name)
        if prop is not None and choices:
            prop["items"] = {"type": "string", "enum": list(choices)}
            prop["maxItems"] = min(max_items, len(choices))
        elif prop is not None:
            del target["properties"][name]
            if name in target.get("required", []):
                target["required"].remove(name)
        return schema

    return patch


def judgement_patch(schema: dict) -> dict:
    """A supported claim needs no reason (the excerpts say it); any other judgement says why. The
    demos keep their reasons: without them the 1.5B judged two more honest negatives
    "contradicted" (results/bench-20261201T143515Z against results/bench-20261201T141012Z), and the
    judgement is written first, so the grammar's empty reason cannot change it."""
    judgements = schema["properties"]["judgement"]["enum"]

    def branch(judgement: dict, reason: dict) -> dict:
        return {"type": "object", "properties": {"judgement": judgement, "reason": reason},
                "required": ["judgement", "reason"], "additionalProperties": False}

    return {"anyOf": [branch({"const": "supported"}, {"const": ""}),
                      branch({"enum": [j for j in judgements if j != "supported"]},
                             {"type": "string", "maxLength": TEXT_MAX_CHARS})]}
