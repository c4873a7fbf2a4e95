"""The tool call an LM asks for, as a contract derived from a toolbox's declarations.

It lives here, above the contracts, because it is derived from the tools: tool_name is one of the
toolbox's tools and every argument an LM may set is a field with the declared type and description.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field, create_model

from contracts import Contract
from tools.declaration import Toolbox
from tools.functions import TOOLBOX


class ToolCallContract(Contract):
    """One tool call the LM asks for. Unset arguments, and arguments the named tool does not take,
    are not sent to it."""

    toolbox: ClassVar[Toolbox]
    tool_name: str

    def arguments(self) -> dict[str, Any]:
        values = self.model_dump(exclude={"tool_name"})
        # In the declared order, which is how the call is shown to the LM and recorded.
        return {k: values[k] for k in self.toolbox.get(self.tool_name).lm_arguments if values.get(k) is not None}


@lru_cache(maxsize=8)
def tool_call_contract(toolbox: Toolbox) -> type[ToolCallContract]:
    """The ToolCall of a toolbox: tool_name is one of its tools, and every argument an LM may set is
    an optional field with the declared type and description."""
    fields: dict[str, Any] = {"tool_name": (Literal[toolbox.names], ...)}
    for name, (kind, description) in toolbox.lm_arguments().items():
        fields[name] = (kind | None, Field(default=None, description=description or None))
    model = create_model("ToolCall", __base__=ToolCallContract, __doc__=ToolCallContract.__doc__, **fields)
    model.toolbox = toolbox
    return model


ToolCall = tool_call_contract(TOOLBOX)
