"""How a tool is declared, once: everything else about it is derived from its declaration.

A declaration names the function (its name and typed arguments are read from the function itself,
as DSPy's `dspy.Tool` reads them; the JSON schemas of the arguments, which only the LM layer's
grammar needs, come from `dspy.Tool`), the output list whose items become evidence refs (the
locator `$.<items>[i]`), whether that evidence is direct or only indirect, how one item reads as
ref text, and what the LM is told about the tool. The tool-call contract, the grammar, the
recorder, the gatekeeper's path rule, the trace summary and the prompts all read a `Toolbox` of
declarations; none of them spells a tool name. Declaring a tool imports no DSPy, so the gatekeeper
runs without it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Literal, get_type_hints

from contracts import LOCATOR, raw_path
from tools.catalog import Catalog


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
    # The item fields that say what an item is of, as its source reports them: the service it
    # belongs to, and the name of what it is (an alert's). The recorder keeps them beside each ref,
    # and code reads them to set aside a ref of another service or alert than the question asks
    # about. A field only a source vouches for: an alert's service label is, but a log line's service
    # is often read from where its file lies (syslog holds every program's lines), so logs declare none.
    service_field: str | None = None
    name_field: str | None = None

    def __post_init__(self):
        if not LOCATOR.match(raw_path(self.items, 0)):
            raise ValueError(f"items {self.items!r} must be lower-case letters and underscores")
        missing = [a for a in self.lm_arguments if a not in self.arg_types]
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
    def tool(self):
        """The function as a `dspy.Tool`, for the JSON schemas of its arguments (program/lm/adapter.py)."""
        import dspy

        return dspy.Tool(self.function, arg_desc=dict(self.arg_desc))

    @cached_property
    def arg_types(self) -> dict[str, Any]:
        """Every argument of the function and its type (Any where it has no hint), read as dspy.Tool reads them."""
        function = self.function if inspect.isfunction(self.function) or inspect.ismethod(self.function) \
            else self.function.__call__
        hints = get_type_hints(function)
        return {name: hints.get(name, Any) for name in inspect.signature(function).parameters}

    @property
    def tool_arguments(self) -> set[str]:
        """Every argument of the function, the LM's and code's alike."""
        return set(self.arg_types)

    @property
    def name(self) -> str:
        return getattr(self.function, "__name__", type(self.function).__name__)

    def __call__(self, **arguments: Any) -> dict:
        return (self.stand_in or self.function)(**arguments)

    @property
    def locator(self) -> str:
        """How this tool's refs are cited: `$.logs[i]`."""
        return raw_path(self.items, "i")

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
                kind = declaration.arg_types.get(argument)
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
                arguments.setdefault(name, (declaration.arg_types[name], declaration.arg_desc.get(name, "")))
        return arguments

    def locators(self) -> str:
        return ", ".join(d.locator for d in self)

    def guide(self) -> str:
        return "Tools: " + " ".join(d.prompt_line() for d in self) + " Use exact service names."

    def with_tools(self, *declarations: ToolDeclaration) -> Toolbox:
        """This toolbox with more tools, or with a declared tool replaced by one of the same name."""
        merged = dict(self.declarations)
        merged.update({d.name: d for d in declarations})
        return Toolbox(merged.values())
