"""How a tool is declared, once: everything else about it is derived from its declaration.

A declaration names the function (DSPy's `dspy.Tool` reads its name, typed arguments and their
JSON schemas from the function itself), the output list whose items become evidence refs (the
locator `$.<items>[i]`), whether that evidence is direct or only indirect, how one item reads as
ref text, and what the LM is told about the tool. The contracts, the tool-call grammar, the
recorder, the gatekeeper's path rule, the trace summary and the prompts all read a `Toolbox` of
declarations; none of them spells a tool name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Literal

import dspy

from tools.catalog import Catalog

LOCATOR = re.compile(r"^\$\.([a-z_]+)\[(0|[1-9][0-9]*)\]$")


@dataclass(frozen=True)
class ToolDeclaration:
    function: Callable[..., dict]
    # The list in the tool's output whose items are cited as $.<items>[i].
    items: str
    evidence: Literal["direct", "indirect"]
    # How one output item reads as the text of its evidence ref.
    render: Callable[[Mapping[str, Any]], str]
    # What the LM is told, after "name(arguments)".
    guide: str
    # The arguments the LM may set, in the order it writes them; the others keep their defaults.
    lm_arguments: tuple[str, ...]
    # Arguments whose values must be names the active catalog knows: argument -> Catalog field.
    catalog_values: Mapping[str, str] = field(default_factory=dict)
    arg_desc: Mapping[str, str] = field(default_factory=dict)
    # What answers the calls instead of `function` (a planted output in a benchmark, a failing
    # backend in a test); the tool's name and arguments stay those of `function`.
    stand_in: Callable[..., dict] | None = None
    # The argument that takes the question's own words when code looks again, before an
    # all-clear, for what a search may have missed (the function then takes `min_share`); None:
    # a no-hit of this tool is not looked at again.
    second_look: str | None = None

    def __post_init__(self):
        if not LOCATOR.match(f"$.{self.items}[0]"):
            raise ValueError(f"items {self.items!r} must be lower-case letters and underscores")
        missing = [a for a in self.lm_arguments if a not in self.tool.args]
        if missing:
            raise ValueError(f"{self.name}: lm_arguments {missing} are not arguments of the function")
        if self.second_look is not None and not {self.second_look, "min_share"} <= self.tool_arguments:
            raise ValueError(f"{self.name}: second_look needs {self.second_look!r} and min_share among the arguments")
        names = {f.name for f in fields(Catalog)}
        wrong = {a: f for a, f in self.catalog_values.items() if a not in self.lm_arguments or f not in names}
        if wrong:
            raise ValueError(f"{self.name}: catalog_values {wrong} must map lm_arguments to Catalog fields "
                             f"({', '.join(sorted(names))})")

    @cached_property
    def tool(self) -> dspy.Tool:
        return dspy.Tool(self.function, arg_desc=dict(self.arg_desc))

    @property
    def tool_arguments(self) -> set[str]:
        """Every argument of the function, the LM's and code's alike."""
        import inspect

        return set(inspect.signature(self.function).parameters)

    @property
    def name(self) -> str:
        return self.tool.name

    def __call__(self, **arguments: Any) -> dict:
        return (self.stand_in or self.function)(**arguments)

    @property
    def label(self) -> str:
        """How the trace summary names this tool's evidence."""
        return f"{self.items} ({self.evidence})"

    def prompt_line(self) -> str:
        return f"{self.name}({', '.join(self.lm_arguments)}) {self.guide}"

    def answered_by(self, stand_in: Callable[..., dict]) -> ToolDeclaration:
        """The same tool, answered by another function (a planted output, a server that fails)."""
        return replace(self, stand_in=stand_in)


class Toolbox:
    """The declared tools of one program, in the order the LM is told about them."""

    def __init__(self, declarations: Iterable[ToolDeclaration]):
        self.declarations: dict[str, ToolDeclaration] = {}
        for declaration in declarations:
            if declaration.name in self.declarations:
                raise ValueError(f"tool {declaration.name!r} is declared twice")
            self.declarations[declaration.name] = declaration
        items = [d.items for d in self.declarations.values()]
        if len(set(items)) != len(items):
            raise ValueError(f"two tools cite the same output list: {items}")
        types: dict[str, Any] = {}
        for declaration in self.declarations.values():
            for argument in declaration.lm_arguments:
                kind = declaration.tool.arg_types.get(argument)
                if types.setdefault(argument, kind) != kind:
                    raise ValueError(f"argument {argument!r} has two types: {types[argument]} and {kind}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.declarations)

    def get(self, name: str) -> ToolDeclaration | None:
        return self.declarations.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.declarations

    def __iter__(self):
        return iter(self.declarations.values())

    def lm_arguments(self) -> dict[str, tuple[Any, str]]:
        """Every argument the LM may set, once, in first-declared order: name -> (type, description)."""
        arguments: dict[str, tuple[Any, str]] = {}
        for declaration in self:
            for name in declaration.lm_arguments:
                schema = declaration.tool.args.get(name, {})
                arguments.setdefault(name, (declaration.tool.arg_types[name], schema.get("description", "")))
        return arguments

    def locators(self) -> str:
        return ", ".join(f"$.{d.items}[i]" for d in self)

    def guide(self) -> str:
        return "Tools: " + " ".join(d.prompt_line() for d in self) + " Use exact service names."

    def with_tools(self, *declarations: ToolDeclaration) -> Toolbox:
        """This toolbox with more tools, or with a declared tool replaced by one of the same name."""
        merged = dict(self.declarations)
        merged.update({d.name: d for d in declarations})
        return Toolbox(merged.values())
