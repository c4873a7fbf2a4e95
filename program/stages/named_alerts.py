"""The named-alert policy: an alert the question names, on a service it names, is always looked
up. The planner may choose more evidence, but never less than the question itself spells out."""

from __future__ import annotations

from program.stages.run import Run
from contracts import Finding
from tools.calls import tool_call_contract
from tools.declaration import Toolbox


def named_alert_calls(run: Run, toolbox: Toolbox, calls: list) -> list:
    """The lookups of the question's named alerts that `calls` lack, noted in the record."""
    # The tool that looks alerts up: the one whose declaration takes a service and an alert name.
    alerts_tool = next((d.name for d in toolbox if {"service", "alert_name"} <= set(d.catalog_values)), None)
    if alerts_tool is None:
        return []
    call = tool_call_contract(toolbox)
    asked = {(c.service, (c.alert_name or "").casefold()) for c in calls if c.tool_name == alerts_tool}
    added = []
    for service in run.target.services:
        for alert in run.target.alerts:
            if (service, alert.casefold()) not in asked:
                added.append(call(tool_name=alerts_tool, service=service, alert_name=alert))
    if added:
        run.record.notes.append(Finding(rule="planner.named_alert_added", message="the question names "
                                        + ", ".join(f"{c.alert_name} on {c.service}" for c in added)
                                        + ", which the planner did not query; code added the lookup"))
    return added
